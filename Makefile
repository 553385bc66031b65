# The two commands of the README.
.PHONY: demo test bench
demo:   ## set up and run the server with the demo app (SQLite), http://127.0.0.1:8787
	scripts/demo.sh
test:   ## set up and run every test
	scripts/test.sh
bench:  ## run the benchmarks (see BENCHMARKS.md)
	cargo bench --bench core
