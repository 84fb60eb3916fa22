//! The `sdr-ingest-transfer` step function.
fn main() {
    workdo_function::run(workdo_demo_functions::sdr_ingest_transfer);
}
