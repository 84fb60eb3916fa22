//! The `shelve` step function.
fn main() {
    workdo_function::run(workdo_demo_functions::shelve);
}
