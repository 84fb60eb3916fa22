//! Step functions: kinds and isolation, deployed functions, and the Python and Ruby SDKs.
//!
//! One test binary for the area (one link of the crate, one shared Postgres cluster); each
//! module is a file beside this one.

#[path = "../support/mod.rs"]
mod support;

mod deployed_functions;
mod function_isolation;
mod functions;
mod sdk;
