//! The HTTP API: the JSON API, the workflow service's routes and its real client, tokens and trust, idempotency, request guards, fuzzed requests and the OpenAPI document.
//!
//! One test binary for the area (one link of the crate, one shared Postgres cluster); each
//! module is a file beside this one.

#[path = "../support/mod.rs"]
mod support;

mod api;
mod api_fuzz;
mod api_trust;
mod api_xml;
mod auth;
mod idempotency;
mod named_queues;
mod openapi;
mod request_guard;
mod trust;
mod workdo_client;
mod workdo_vocabulary;
