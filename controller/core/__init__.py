"""The controller's decision core: pure functions, no I/O, no clock reads."""
