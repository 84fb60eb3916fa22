//! The `process-content` step function.
fn main() {
    workdo_function::run(workdo_demo_functions::process_content);
}
