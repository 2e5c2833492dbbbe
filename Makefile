# Every target works on a fresh clone: it creates .venv and installs the project into it first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo experiments experiments-quick benchmarks bench-gpu docs gallery clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,experiments,docs,nn]"
	touch $(STAMP)

# One BLAS thread for tests and experiments (small factorisations; a loaded machine); the
# benchmarks keep NumPy's default so that its baseline is not slowed down.
ONE_BLAS := OPENBLAS_NUM_THREADS=1

# The whole suite on every core (pytest-xdist; --dist loadfile keeps each test file in one worker,
# so that the programs its tests share compile once), XLA's compiled programs kept under the clone
# in .cache/jax (tests/conftest.py; a second `make test` reads them instead of compiling), and the
# 25 slowest tests at the end. tests/README.md: one file, one test.
test: $(STAMP)
	$(ONE_BLAS) $(PY) -m pytest -n auto --dist loadfile --durations=25 -q

demo: $(STAMP)
	$(ONE_BLAS) $(PY) -m experiments.demo

experiments-quick: $(STAMP)
	$(ONE_BLAS) $(PY) -m experiments.run_all --quick

experiments: $(STAMP)
	$(ONE_BLAS) $(PY) -m experiments.run_all

benchmarks: $(STAMP)
	$(PY) -m benchmarks.run_all

# The GPU table (benchmarks/gpu.py): needs jax with CUDA in .venv and a GPU; refuses without one.
bench-gpu: $(STAMP)
	$(PY) -m benchmarks.gpu

# HTML site in docs/_build/html (index.html); -W: a warning fails the build. The Sphinx
# packages are in the docs extra and, for tests/reproduction/test_docs.py, in the test extra too.
docs: $(STAMP)
	$(ONE_BLAS) $(PY) -m sphinx -W --keep-going -b html docs docs/_build/html
	@echo "Documentation: docs/_build/html/index.html"

# The figures and printed results of the example gallery (docs/_static/gallery/): run after an
# example changes and commit what it writes; `make docs` only reads them (about a minute on CPU).
gallery: $(STAMP)
	$(ONE_BLAS) $(PY) docs/make_gallery.py

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis docs/_build docs/api
