//! Property tests of placement.
