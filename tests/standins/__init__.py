"""Stand-in programs for the launch tests: they behave like EasyR1 and ``vllm serve`` at the boundaries the launch
script sees (files written, HTTP endpoints, signals, exit codes) and run on a CPU in a second."""
