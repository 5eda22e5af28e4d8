//! Tells rustc which Chorus library to link and where to find it.
//!
//! * `CHORUS_LIB_NAME`: library name without `lib` and `.so` (default `chorus`; for example
//!   `chorus-host` for the host-only library of a CUDA build).
//! * `CHORUS_LIB_DIR`: directory holding that library (for example a build tree's `src/api`).
//!   It is added to the link search path and, for this package's own tests and examples, to
//!   the run-time search path (rpath). Without it the system linker path is used, as for an
//!   installed library.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CHORUS_LIB_NAME");
    println!("cargo:rerun-if-env-changed=CHORUS_LIB_DIR");

    let name = match env::var("CHORUS_LIB_NAME") {
        Ok(n) if !n.trim().is_empty() => n.trim().to_string(),
        _ => "chorus".to_string(),
    };
    println!("cargo:rustc-link-lib=dylib={}", name);

    if let Some(dir) = env::var_os("CHORUS_LIB_DIR") {
        if !dir.is_empty() {
            let dir = std::path::PathBuf::from(dir);
            let dir = dir.canonicalize().unwrap_or(dir);
            let dir = dir.display();
            println!("cargo:rustc-link-search=native={}", dir);
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
            println!("cargo:lib_dir={}", dir);
        }
    }
}
