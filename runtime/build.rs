// The migrations are embedded by `sqlx::migrate!` at compile time; without this, adding or
// editing a migration does not rebuild the crate and the binary carries the old set.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
