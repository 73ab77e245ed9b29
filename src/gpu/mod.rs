//! GPU knowledge: resource names, what a pod asks for, the SKU catalog.
