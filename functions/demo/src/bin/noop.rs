//! `noop`: a step function that completes at once, whatever the event. The smallest function
//! binary the SDK makes: what a call costs before a function does any work (`workdo bench`).
fn main() {
    workdo_function::run(|_| Ok(workdo_function::Outcome::completed()));
}
