# `make run` and `make test` install what is missing first, so a fresh Debian 12 machine
# needs nothing but these two commands (as root).
VENV      := .venv
PY        := $(VENV)/bin/python
# bcc's Python module only exists as Debian's python3-bpfcc, built for Debian's python3:
# the venv is made from /usr/bin/python3 with --system-site-packages so it can import it.
SYSPY     := /usr/bin/python3
APT_PKGS  := python3-bpfcc python3-venv linux-headers-amd64 bpftool linux-perf \
             tmux librsvg2-bin sudo gcc binutils e2fsprogs golang-go
KTOP_LINK := /usr/local/bin/ktop
MAN_PAGE  := /usr/local/share/man/man1/ktop.1

.PHONY: all setup deps link bytecode man bpf-cache run test lint bench bench-waits bench-idle bench-soak screenshots clean

all: setup

setup: deps $(VENV)/.installed link bytecode man bpf-cache

deps:
	@missing=""; for p in $(APT_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(SYSPY) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	@$(PY) -c "import bcc" || { echo "bcc is not importable from $(VENV): is python3-bpfcc installed?"; exit 1; }
	@touch $@

# `sudo ktop` must work: sudo's secure_path includes /usr/local/bin. Always refreshed, so
# the link points at this checkout even if another one made it.
link: $(VENV)/.installed
	@ln -sfn $(CURDIR)/$(VENV)/bin/ktop $(KTOP_LINK)

# Byte-compiled now, as pip compiles an installed package: an editable checkout is compiled
# on import otherwise, and with PYTHONDONTWRITEBYTECODE set (as on these machines) on every
# start (0.1 s of ktop's first screen went to compiling its changed modules).
bytecode: $(VENV)/.installed
	@$(PY) -m compileall -q ktop

# `man ktop`: generated from the CLI's options and the screens' keys (ktop/manpage.py), so
# it says what this checkout does; replaced whole by rename.
man: $(VENV)/.installed
	@mkdir -p $(dir $(MAN_PAGE))
	@$(PY) -m ktop.manpage > $(MAN_PAGE).tmp && mv -f $(MAN_PAGE).tmp $(MAN_PAGE)

# Every pane's BPF program compiled for the running kernel into /var/cache/ktop (root), so the
# first `ktop` loads them at once; a later kernel, source or option compiles on its first run.
bpf-cache: $(VENV)/.installed
	@if [ "$$(id -u)" = 0 ]; then \
	  out=$$(mktemp -d) && $(VENV)/bin/ktop --snapshot $$out/fill.json --duration 0.1 >/dev/null 2>&1; \
	  rm -rf $$out; echo "BPF programs compiled for $$(uname -r) in /var/cache/ktop"; \
	fi

run: setup
	$(VENV)/bin/ktop $(ARGS)

test: setup
	$(PY) -m ruff check ktop tests bench
	$(PY) -m mypy
	@# The tests that leave the machine alone run two at a time; then, alone, those that run
	@# the live kernel's collectors or time a workload (marked `machine` by tests/conftest.py).
	@# Exit 5 is "no test selected" (PYTEST_ARGS naming a file of one kind only).
	@rc=0; \
	$(PY) -m pytest -q -ra -n 2 -m "not machine" $(PYTEST_ARGS) || [ $$? -eq 5 ] || rc=1; \
	$(PY) -m pytest -q -ra -m machine $(PYTEST_ARGS) || [ $$? -eq 5 ] || rc=1; \
	exit $$rc

bench: setup
	$(PY) bench/busy.py
	$(PY) bench/overhead.py
	$(PY) bench/waits_cost.py
	$(PY) bench/irqs_cost.py
	$(PY) bench/syscalls_cost.py
	$(PY) bench/serve_load.py
	$(PY) bench/startup.py

# The waits pane's part alone: a pipe ping-pong's throughput with and without it (and over
# empty programs: the floor), then its losses under churn.
bench-waits: setup
	$(PY) bench/waits_cost.py
	$(PY) bench/waits_churn.py

# ktop -d 2 (all panes) beside perf top at its default refresh, idle: CPU, BPF, memory.
bench-idle: setup
	$(PY) bench/overhead.py --idle-only

# Ten minutes of the screen under heavy mixed load: RSS and losses every 30 s (not in `bench`).
bench-soak: setup
	$(PY) bench/soak.py --minutes $(or $(MINUTES),10)

screenshots: setup
	$(PY) bench/screenshots.py

clean:
	rm -rf $(VENV) build *.egg-info
