//! Downstream servers through the registry: result parsing, faults, reconnects, filters.
