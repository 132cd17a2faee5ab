//! Embeds the built viewer for `collector report` when it exists (`viewer/dist`, written by
//! `scripts/build-viewer.sh`, or `OOMSCOPE_VIEWER_DIST`); without it the collector still builds
//! and `collector report` says how to get it.
//!
//! With the `tch` feature: compiles the C++ allocator shim (`cpp/allocator_shim.cpp`) against
//! the libtorch named by `LIBTORCH` and links it.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    viewer::embed();
    if std::env::var_os("CARGO_FEATURE_TCH").is_some() {
        #[cfg(feature = "tch")]
        shim::build();
    }
}

#[cfg(feature = "tch")]
mod shim {
    use super::PathBuf;

    pub fn build() {
        println!("cargo:rerun-if-changed=cpp/allocator_shim.cpp");
        println!("cargo:rerun-if-env-changed=LIBTORCH");
        let Some(libtorch) = std::env::var_os("LIBTORCH").map(PathBuf::from) else {
            panic!(
                "the `tch` feature needs LIBTORCH pointing at a libtorch 2.11 (e.g. <site-packages>/torch); \
                 `bash scripts/setup-torch.sh` installs one and scripts/env.sh sets it"
            );
        };
        // CUDA headers come with the wheel's nvidia packages, beside torch in site-packages.
        let cuda_include = libtorch.join("../nvidia/cu13/include");
        cc::Build::new()
            .cpp(true)
            .file("cpp/allocator_shim.cpp")
            .include(libtorch.join("include"))
            .include(libtorch.join("include/torch/csrc/api/include"))
            .include(&cuda_include)
            .flag("-std=c++17")
            .define("_GLIBCXX_USE_CXX11_ABI", "1")
            .warnings(false)
            // Glue that copies a few statistics out of libtorch once a mark: -O1 without debug
            // info runs as well and halves the compile on the release build's critical path.
            .opt_level(1)
            .debug(false)
            .compile("oomscope_allocator_shim");
        let lib = libtorch.join("lib");
        println!("cargo:rustc-link-search=native={}", lib.display());
        // Binaries built here find the libtorch they were built against without
        // LD_LIBRARY_PATH; elsewhere (a GPU host with its own PyTorch) LD_LIBRARY_PATH still wins.
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
        // Explicitly needed: the shim references symbols of all three.
        for name in ["c10_cuda", "torch_cuda", "c10"] {
            println!("cargo:rustc-link-lib=dylib={name}");
        }
    }
}

mod viewer {
    use super::PathBuf;

    const FILES: [&str; 2] = ["oomscope-viewer.js", "oomscope-viewer_bg.wasm"];

    /// Writes `$OUT_DIR/viewer_assets.rs`: the viewer's files as `Some(include_…!)`, or `None`.
    pub fn embed() {
        println!("cargo:rerun-if-env-changed=OOMSCOPE_VIEWER_DIST");
        let manifest =
            PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
        let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
        let dist = std::env::var_os("OOMSCOPE_VIEWER_DIST")
            .map_or_else(|| manifest.join("../viewer/dist"), PathBuf::from);
        // Watch the files when they exist; otherwise the viewer directory, whose listing changes
        // when trunk creates dist/ (a missing path would rerun this script on every build).
        let found = FILES.iter().all(|f| dist.join(f).is_file());
        if found {
            for f in FILES {
                println!("cargo:rerun-if-changed={}", dist.join(f).display());
            }
        } else if dist.parent().is_some_and(std::path::Path::is_dir) {
            println!(
                "cargo:rerun-if-changed={}",
                dist.parent().expect("checked").display()
            );
        }
        let code = if found {
            let js = dist.join(FILES[0]);
            let wasm = dist.join(FILES[1]);
            format!(
                "/// The viewer's JavaScript glue.\npub const VIEWER_JS: Option<&str> = Some(include_str!({js:?}));\n\
                 /// The viewer's WASM module.\npub const VIEWER_WASM: Option<&[u8]> = Some(include_bytes!({wasm:?}));\n"
            )
        } else {
            println!(
                "cargo:warning=viewer not built ({} missing): `collector report` will need OOMSCOPE_VIEWER_DIST; run scripts/build-viewer.sh",
                dist.display()
            );
            "/// Not built.\npub const VIEWER_JS: Option<&str> = None;\n/// Not built.\npub const VIEWER_WASM: Option<&[u8]> = None;\n".to_owned()
        };
        std::fs::write(out.join("viewer_assets.rs"), code).expect("OUT_DIR is writable");
    }
}
