//! Misuse of the macros is a compile error pointing at the user's code.

#[test]
fn misuse_is_a_spanned_compile_error() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
