//! The `gpu` CEL variable.
