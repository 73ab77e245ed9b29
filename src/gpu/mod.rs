//! GPU knowledge: resource names, what a pod asks for, the SKU catalog.
pub mod catalog;
pub mod facts;
pub mod pools;
pub mod selection;
