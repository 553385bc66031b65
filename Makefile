# The two commands of the README.
.PHONY: demo test bench
demo:   ## set up and run the server with the demo app (SQLite), http://127.0.0.1:8787
	scripts/demo.sh
test:   ## set up and run every test
	scripts/test.sh
bench:  ## run every benchmark, print the summary, write BENCHMARKS.md's generated part
	scripts/bench.sh
