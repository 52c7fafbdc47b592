"""rlf's own tests, a package so that every module has a unique dotted name (``tests.ui.test_ui``) and
imports its shared helpers from :mod:`tests.support`. It must stay a regular package: verl installs a
top-level ``tests`` package of its own, which a namespace package here would lose to."""
