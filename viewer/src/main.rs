//! The viewer's entry point (what trunk builds): mounts the app.

fn main() {
    oomscope_viewer::start();
}
