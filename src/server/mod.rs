//! HTTP edge: router, handlers, TLS, health, metrics, shutdown.
