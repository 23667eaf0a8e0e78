//! cadre-server
