//! Empty: this package has build dependencies only for their features (its Cargo.toml says
//! why), and Cargo resolves build dependencies only for a package with a build script.

fn main() {}
