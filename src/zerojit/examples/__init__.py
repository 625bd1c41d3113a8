"""Small example kernels used by the demo and the tests."""
