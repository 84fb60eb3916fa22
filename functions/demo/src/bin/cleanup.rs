//! The `cleanup` step function.
fn main() {
    workdo_function::run(workdo_demo_functions::cleanup);
}
