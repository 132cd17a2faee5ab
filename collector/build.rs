//! With the `tch` feature: compiles the C++ allocator shim (`cpp/allocator_shim.cpp`) against
//! the libtorch named by `LIBTORCH` and links it. Without the feature: nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_TCH").is_some() {
        #[cfg(feature = "tch")]
        shim::build();
    }
}

#[cfg(feature = "tch")]
mod shim {
    use std::path::PathBuf;

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
