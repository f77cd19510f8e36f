//! Registration exists only on `Worker<Mutable>`: a locked worker has no `register_tool`.

#[test]
fn locked_workers_cannot_register_tools() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
