//! The `google-convert` step function.
fn main() {
    workdo_function::run(workdo_demo_functions::google_convert);
}
