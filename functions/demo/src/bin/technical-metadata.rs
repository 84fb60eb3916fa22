//! The `technical-metadata` step function.
fn main() {
    workdo_function::run(workdo_demo_functions::technical_metadata);
}
