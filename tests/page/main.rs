//! The admin page, in headless Chromium and over HTTP: the overview, paging, machines, live updates and the operator's actions.
//!
//! One test binary for the area (one link of the crate, one shared Postgres cluster); each
//! module is a file beside this one.

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod admin_live;
mod admin_machines;
mod admin_paging;
mod drawings;
mod operator;
