//! The `end-accession` step function.
fn main() {
    workdo_function::run(workdo_demo_functions::end_accession);
}
