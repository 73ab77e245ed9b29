//! The tests `.ci/run` runs again on the release build, one binary (one
//! link-time optimised link rather than three):
//!
//! - `hostile_clients`: attacks on the server as shipped, where timing
//!   matters; ignored in the debug build, run one at a time on the release
//!   build (`cargo test --release --test release_checks hostile_clients::
//!   -- --test-threads=1`).
//! - `boundary_model` and `properties`: generated cases, a small default
//!   in the debug build and their full size on the release build.

// Tests read fixtures with `Value::pointer`: clippy.toml keeps it out of
// the crate itself, where objects under admission are read per request.
#![allow(clippy::disallowed_methods)]

mod common;

mod boundary_model;
mod hostile_clients;
mod properties;
