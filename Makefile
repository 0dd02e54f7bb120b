# Two commands do all the set-up on a fresh machine (only Python needed beforehand):
#   make demo   installs what is missing, then runs placeviz on a bundled sample
#   make test   installs what is missing, then runs ruff, mypy and the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.placeviz-installed
DEMO_DIR ?= placeviz-demo

.PHONY: install demo test lint docs bench graphviz clean release

install: $(STAMP) graphviz

# The virtualenv with placeviz (editable), TensorFlow (CPU) and the test tools.
$(STAMP): pyproject.toml setup.py $(wildcard placeviz/*.c placeviz/*/*.c) scripts/bootstrap-venv.sh
	@bash scripts/bootstrap-venv.sh "$(PYTHON)" "$(VENV)"
	@touch $@

# Graphviz's `dot` (a system package): installed with apt-get when missing and we are root.
graphviz:
	@bash scripts/ensure-graphviz.sh

demo: install
	$(BIN)/placeviz demo -o $(DEMO_DIR)

lint: install
	$(BIN)/ruff check .

# The lint rules' pages (docs/rules/*.md) are generated from the rules; a test fails when they drift.
docs: install
	$(BIN)/placeviz rules --write-docs docs/rules

# TF's proto descriptors the core reads (placeviz/data/tf_protos.binpb), from the installed TF;
# tests/test_protos.py fails when they drift.
.PHONY: protos
protos: install
	$(BIN)/python -m placeviz.protos_generate

# The README's pictures (docs/images/*.png), rendered by placeviz from bundled samples; never drawn
# by hand. Rendered from inside a temporary directory so their titles name the sample, not a path.
IMAGES := $(CURDIR)/docs/images
.PHONY: images
images: install
	@mkdir -p $(IMAGES)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cd "$$tmp" && \
	$(CURDIR)/$(BIN)/placeviz samples build inception -o inception.meta --ps-tasks 2 --sync-replicas && \
	$(CURDIR)/$(BIN)/placeviz samples build mlp -o mlp.meta --ps-tasks 2 --sync-replicas && \
	$(CURDIR)/$(BIN)/placeviz render inception.meta -o $(IMAGES)/overview.png --view overview && \
	$(CURDIR)/$(BIN)/placeviz render inception.meta -o $(IMAGES)/devices.png --view devices && \
	$(CURDIR)/$(BIN)/placeviz render mlp.meta -o $(IMAGES)/sync.png --view sync && \
	$(CURDIR)/$(BIN)/placeviz render inception.meta -o $(IMAGES)/inception-sync.png --view sync

test: install
	@scripts/ensure-chromium.sh
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest

bench: install
	$(BIN)/python benchmarks/gen_graphs.py --sizes 10k,50k,200k,1m
	$(BIN)/python benchmarks/run.py

# A release: the annotated tag v<version> (pyproject.toml) on a clean HEAD, the `rev:` that
# pre-commit users pin. Push it yourself afterwards: git push origin v<version>.
VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
release:
	@test -n "$(VERSION)" || { echo "no version in pyproject.toml"; exit 2; }
	@git diff --quiet HEAD -- || { echo "the work tree has uncommitted changes; commit them first"; exit 2; }
	@! git rev-parse -q --verify "refs/tags/v$(VERSION)" >/dev/null || { echo "tag v$(VERSION) exists; bump version in pyproject.toml"; exit 2; }
	git tag -a "v$(VERSION)" -m "placeviz $(VERSION)"
	@echo "tagged v$(VERSION); publish it with: git push origin v$(VERSION)"

clean:
	rm -rf $(VENV) $(DEMO_DIR) .pytest_cache .ruff_cache *.egg-info
