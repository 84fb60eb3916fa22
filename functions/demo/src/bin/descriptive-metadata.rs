//! The `descriptive-metadata` step function.
fn main() {
    workdo_function::run(workdo_demo_functions::descriptive_metadata);
}
