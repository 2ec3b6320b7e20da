# The two set-up commands of the README: `make demo` and `make test`. Both install what they need.
PYTHON ?= /usr/bin/python3
VENV   := .venv
BIN    := $(VENV)/bin
# Run the rdma-marked suite directly where the host has RDMA devices, else in one lab boot.
HAS_RDMA := $(shell ls /sys/class/infiniband 2>/dev/null | head -n1)
LAB    := $(if $(HAS_RDMA),,$(BIN)/rdmacli lab run --)
# the rdma suite's boot also brings up Soft-iWARP (siw0, siw1) for tests/lab/test_iwarp.py
LAB_IWARP := $(if $(HAS_RDMA),,$(BIN)/rdmacli lab run --iwarp --)
LAB_NODES := $(if $(HAS_RDMA),,$(BIN)/rdmacli lab run --nodes 4 --rails 2 --)

PREFIX ?= /usr/local

.PHONY: deps venv deb deb-test test unit lint agent-soak lab-test lab-test-a lab-test-b lab-stress lab-soak lab-mesh-test mesh-lane-a mesh-lane-b mesh-whole lab-watch-test lab-shell-test lab-systemd-test demo bench scale-bench watch-sim profile docs pictures install clean

deps:
	@scripts/bootstrap

$(BIN)/rdmacli: pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)   # system site: python3-pyverbs
	# eager: the newest of each dependency in the venv, whatever older one the system site holds
	# (Debian's python3-click 8.1.3 satisfies the floor; the package's build tests that one)
	$(BIN)/pip install -q --upgrade --upgrade-strategy eager -e '.[dev,docs,web]'
	@touch $@

# the native data path (rdmacli/native): built in place; where it cannot be, rdmacli measures
# with its Python loops and says so (data_path: python)
NATIVE := rdmacli/native/.built
$(NATIVE): $(BIN)/rdmacli $(wildcard rdmacli/native/*.c rdmacli/native/*.h) rdmacli/native/_build.py
	$(BIN)/python -m rdmacli.native._build
	@touch $@

venv: deps $(BIN)/rdmacli $(NATIVE)

# the typed reports, under mypy's --strict (the rest at its default strictness, pyproject.toml)
STRICT = rdmacli/mesh/findings.py rdmacli/mesh/meshreport.py rdmacli/mesh/watchfindings.py
lint: venv
	$(BIN)/ruff check rdmacli tests benchmarks scripts
	$(BIN)/ruff format --check rdmacli tests benchmarks scripts
	$(BIN)/mypy
	$(BIN)/mypy --strict $(STRICT)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# four workers: the slowest unit tests wait on real time (agents held past SIGKILL, hung agents
# stopped at the schedule's end), 262 s one at a time here, 141-151 s with -n 4 beside lab shell's boot
unit: venv
	$(BIN)/python -m pytest -m "not rdma and not labvm and not mesh and not package and not systemdvm" -q -n 4 tests

# The rdma suite in two boots side by side, one emulated CPU each (a lab case is mostly one Python
# at a time: one boot keeps one core busy, so two use the machine's two; on a host with RDMA
# devices the halves run one after the other, they would share its ports). Half a: the iWARP
# boot's files and ping's (ping moved here: on a CI host half as fast, a ended 10 minutes before
# b), then, in the same boot, lat's and the one-way bw stream's lab cases again with the
# native data path disabled (the pure-Python loops must keep passing where the extension is not
# built); the sanitizer test's build of the native loops is made here, on the host (gcc is slow
# under TCG). Half b: every other lab file (a new one lands there).
LAB_A := tests/lab/test_iwarp.py tests/lab/test_bw_lat.py tests/lab/test_perftest_interop.py tests/lab/test_ping.py
LAB_B := $(filter-out $(LAB_A) tests/lab/test_stress.py,$(sort $(wildcard tests/lab/test_*.py)))
LAB_HALF_CPUS := $(if $(HAS_RDMA),,1)
LAB_PYTEST := $(BIN)/python -m pytest -m "rdma and not stress" --require-rdma -p no:cacheprovider -q --durations=0
lab-test-a: venv
	rm -rf build/sanitized && RDMACLI_NATIVE_SANITIZE=1 $(BIN)/python -m rdmacli.native._build build/sanitized
	RDMACLI_LAB_CPUS=$(LAB_HALF_CPUS) $(LAB_IWARP) env RDMACLI_SANITIZED_BUILD=build/sanitized $(LAB_PYTEST) $(LAB_A)

# and the loops of bw and lat on the Python data path (the native one's fallback), in b's boot:
# a's is the longer half
lab-test-b: venv
	RDMACLI_LAB_CPUS=$(LAB_HALF_CPUS) $(LAB) sh -c '$(LAB_PYTEST) $(LAB_B) \
	  && RDMACLI_DATA_PATH=python $(BIN)/python -m pytest -m rdma --require-rdma \
	  -p no:cacheprovider -q tests/lab/test_bw_lat.py -k "lat_each_op or one_way"'

LAB_HALVES := $(if $(HAS_RDMA),"lab-test-a lab-test-b","lab-test-a" "lab-test-b")
lab-test: venv
	@MAKE="$(MAKE)" scripts/lanes $(LAB_HALVES)

# The lab's short server and receiver cases, STRESS times each (default 20), in one boot; every
# failure is listed with its case and repetition. For people and releases, not part of `make test`.
STRESS ?= 20
lab-stress: venv
	$(LAB) env STRESS=$(STRESS) $(BIN)/python -m pytest -m stress --require-rdma -p no:cacheprovider -q -rf tests

# Eight watch agents x two rails for SOAK_S seconds (default 1800) with a restart, a reload and a
# fault in the middle: their memory, fds, threads and RDMA objects at start and end, printed and
# held flat; nothing named while healthy. For people and releases, not part of `make test`.
SOAK_S ?= 1800
lab-soak: venv
	$(BIN)/rdmacli lab run --nodes 8 --rails 2 -- env SOAK_S=$(SOAK_S) $(BIN)/python -m pytest -m soak \
	  --require-rdma -p no:cacheprovider -q -s tests/mesh/test_soak.py

# The watch agent through SOAK_S seconds (default 3600) of reloads (rails removed and added, nodes
# removed and reordered, its own name gone, a broken map), things planted at its state path, a
# full disk, live web-config changes and slow clients, on this host: the real CLI with only its
# RDMA prober replaced (tests/soak/). Alive, its verdicts and /metrics as they were, its
# footprint flat. For people and releases, not part of `make test`.
agent-soak: venv
	SOAK_S=$(SOAK_S_AGENT) $(BIN)/python tests/soak/agent_chaos.py
SOAK_S_AGENT ?= 3600

# `rdmacli mesh` on lab nodes (their own boot: `rdmacli lab --nodes 16`; most tests use eight), real
# launchers, and `rdmacli watch` as services. Alone and with two emulated CPUs: with one, or beside
# another boot, the host's contention reads as a slow fabric (the probe's matrix, the watch
# services' faults named within so many windows, and a rail link judged slow all failed there).
# Inside the boot, scripts/lanes runs the eight-node files in two lanes at once on nodes of their
# own (a mesh run mostly waits for its slots), then test_probe.py alone on all 16 nodes. Measured
# in two fresh clones' runs: lane a 707 and 695 s, lane b 707 and 715 s, test_probe 234 and 231 s:
# the boot 989 and 981 s.
MESH_PYTEST := $(BIN)/python -m pytest -m "mesh and not soak" --require-rdma -p no:cacheprovider -q --durations=0
MESH_A := tests/mesh/test_mesh.py tests/mesh/test_watch_device.py
MESH_B := tests/mesh/test_rails.py tests/mesh/test_watch.py
lab-mesh-test: venv
	$(BIN)/rdmacli lab run --nodes 16 --rails 2 -- env MAKE="$(MAKE)" scripts/lanes mesh-lane-a mesh-lane-b -- mesh-whole

# inside lab-mesh-test's boot: n01-n08, n09-n16 (each lane's processes, cm_ids, QPs and nftables
# rules told apart by RDMACLI_MESH_LANE or their pids), and every other mesh file
mesh-lane-a:
	RDMACLI_MESH_LANE=a $(MESH_PYTEST) $(MESH_A) $(addprefix --deselect ,$(MESH_ALONE))
mesh-lane-b:
	RDMACLI_MESH_LANE=b $(MESH_PYTEST) $(MESH_B)
mesh-whole:
	$(MESH_PYTEST) $(filter-out $(MESH_A) $(MESH_B),$(sort $(wildcard tests/mesh/test_*.py))) $(MESH_ALONE)

# cases that hold a healthy fabric to "nothing named" with the lab to themselves: beside the other
# lane the host's contention reads as the fabric's. The mesh at its own defaults (3 s slots): its
# pairs took up to 2.5 s of their slots, and one CI run's listener, late from a pair that overran,
# got its link named NOLSN; two colluding agents: one CI run named the liars' own link SLOW (every
# one of its round trips 35 ms, the best pair's 0.8 ms, while three Python processes ran beside)
MESH_ALONE := tests/mesh/test_mesh.py::test_eight_nodes_at_the_defaults_pass_two_runs_in_a_row \
  tests/mesh/test_mesh.py::test_two_colluding_agents_get_nobody_blamed_or_drained

# `rdmacli watch` on 8 lab nodes x 2 rails as services, faults injected while they run, a real
# Prometheus scraping them: part of lab-mesh-test (its boot, lane b); this runs it alone
lab-watch-test: venv
	$(BIN)/rdmacli lab run --nodes 16 --rails 2 -- $(BIN)/python -m pytest -m mesh --require-rdma -p no:cacheprovider -q -s tests/mesh/test_watch.py

# `rdmacli lab shell` driven through a pty from the host: it boots its own VM.
lab-shell-test: venv
	RDMACLI_LAB_CPUS=$(LAB_HALF_CPUS) $(BIN)/python -m pytest -m labvm --require-rdma -p no:cacheprovider -q tests

# The watch agent's unit started by systemd: the package (make deb, its unit tests left to
# deb-test) installed in a minimal Debian 12 made by mmdebstrap, booted with systemd as init
# (tests/systemd). About 150 s of boot under TCG, beside stage 1's host suites.
lab-systemd-test: venv
	DEB_BUILD_OPTIONS=nocheck $(MAKE) --no-print-directory deb
	RDMACLI_LAB_CPUS=$(LAB_HALF_CPUS) $(BIN)/python -m pytest -m systemdvm -p no:cacheprovider -q tests/systemd

# Three stages (scripts/lanes): lint and the unit suite on the host, lab shell's boot beside
# them; then the rdma suite's two halves side by side, boots of one emulated CPU each (a lab case
# is mostly one Python at a time: such a boot keeps one of this machine's two cores busy); then
# the mesh suite alone with both CPUs. Each suite's time is printed, each line prefixed with its
# suite; CI has 90 minutes and the goal is 40 on this machine kind. Two fresh clones' runs: stage
# 1 151 s, stage 2 (halves a / b) 763 / 751 and 712 / 675 s, stage 3 989 and 981 s; all suites
# 1897 and 1847 s; with the systemd lab in stage 1 (300 s), 2171 s (docs/contributing.md).
# (On a host with RDMA devices the rdma halves are one lane: LAB_HALVES.)
STAGES := "lint unit" "lab-shell-test" "lab-systemd-test" -- $(LAB_HALVES) -- lab-mesh-test
test: venv
	@t0=$$(date +%s); MAKE="$(MAKE)" scripts/lanes $(STAGES); rc=$$?; \
	echo "make test: all suites took $$(( $$(date +%s) - t0 )) s"; exit $$rc

demo: venv
	$(LAB_NODES) sh -c '$(BIN)/rdmacli devices && $(BIN)/rdmacli selftest && \
	  if [ -n "$$RDMACLI_LAB_NODES" ]; then $(BIN)/rdmacli mesh "$$RDMACLI_LAB_NODES" --launcher exec \
	    --map "$$RDMACLI_LAB_RAILS_MAP" --round-time 6 --launch-timeout 120; fi'

# Benchmarks: rdmacli and the C tools side by side in one lab boot (not part of `make test`).
# The fabric simulator (host only, no RDMA): the real coordinator's cost and the blame's truth on
# N nodes x R rails with faults injected (benchmarks/fabric_sim.py; SCENARIOS per size).
SCENARIOS ?= 100
scale-bench: venv
	cd benchmarks && $(CURDIR)/$(BIN)/python fabric_sim.py --scenarios $(SCENARIOS)
	cd benchmarks && $(CURDIR)/$(BIN)/python liar_sim.py

# `watch status` at 1000 nodes x 8 rails from simulated agents' docs, with ground truth
watch-sim: venv
	cd benchmarks && $(CURDIR)/$(BIN)/python watch_sim.py --scenarios $(SCENARIOS)

bench: venv
	$(LAB) sh -c 'cd benchmarks && $(CURDIR)/$(BIN)/python bench.py'

# cProfile of `rdmacli connect -c 128` against ucmatose, in the lab
profile: venv
	$(LAB) sh -c 'cd benchmarks && $(CURDIR)/$(BIN)/python profile_connect.py 128'

# The docs' pictures: real screens (connect --events, events, a mesh with a NIC down, watch status
# naming it) captured on a pty in the lab and saved as SVG under docs/images (scripts/pictures.py)
pictures: venv
	$(BIN)/rdmacli lab run --nodes 4 --rails 2 -- $(BIN)/python scripts/pictures.py

# Regenerate man/ and completions/ from the click tree (a unit test fails when they are stale);
# the generator is a build-time script (scripts/gendocs.py), not part of the installed package.
docs: venv
	$(BIN)/python scripts/gendocs.py

# The Debian package (debian/), built with Debian's tooling from the tree's files (those git
# knows, committed or not, not ignored) in build/deb/src, then checked by lintian; as root it first
# installs the build dependencies (`apt-get build-dep`). DEB_BUILD_OPTIONS=nocheck skips the unit
# suite the build runs on Debian's own packages.
DEB_OUT := build/deb
deb:
	@if [ "$$(id -u)" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 build-dep -y -q ./ >/dev/null; \
	  else echo "make deb: not root: the build dependencies must be there (apt-get build-dep ./)"; fi
	rm -rf $(DEB_OUT) && mkdir -p $(DEB_OUT)/src
	git ls-files -z -co --exclude-standard | tar --null -T - --ignore-failed-read -cf - | tar -xf - -C $(DEB_OUT)/src
	# the system's PATH: Debian's python3 builds it, not a pyenv or venv one found first
	cd $(DEB_OUT)/src && env PATH=/usr/sbin:/usr/bin:/sbin:/bin dpkg-buildpackage -us -uc -b
	lintian --fail-on error $(DEB_OUT)/rdmacli_*.changes
	@ls $(DEB_OUT)/*.deb

# The package as an admin meets it: lintian, its contents, and (as root, where it is not installed
# yet) apt-get install, an upgrade and a purge on this host (tests/package/test_deb.py).
deb-test: deb venv
	$(BIN)/python -m pytest -m package -p no:cacheprovider -q tests/package

# Man pages and completions for packagers: `make install PREFIX=/usr DESTDIR=...`.
install:
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	install -m 644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 completions/rdmacli.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/rdmacli
	install -m 644 completions/_rdmacli $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_rdmacli
	install -m 644 completions/rdmacli.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/rdmacli.fish

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache $(NATIVE) rdmacli/native/_datapath*.so
