# PGXS build of the extension. The C++ core (and the CUDA backend when nvcc is
# found) are built by CMake into $(BUILD_DIR); this file links the core into the
# PostgreSQL module and installs the CUDA backend next to it.
#
#   make && make install        the extension alone (PGXS, CMake, a C++ compiler),
#                               and the extension "vector" unless pgvector is installed
#   make check-unit             also builds and runs the core's unit tests (GoogleTest)
#   TSDG_DEVELOPER=1 make       warnings are errors, tests and bench tools built too
#   TSDG_CMAKE_OPTIONS=...      more CMake options (e.g. -DTSDG_WITH_CUDA=OFF)
EXTENSION = pg_tsdg
EXTVERSION = 0.1.0
MODULE_big = pg_tsdg

BUILD_DIR ?= build
BUILD_TYPE ?= Release
TSDG_DEVELOPER ?=
ifeq ($(TSDG_DEVELOPER),1)
TSDG_CMAKE_DEVELOPER = -DTSDG_WITH_TESTS=ON -DTSDG_WERROR=ON
TSDG_WERROR_CFLAGS = -Werror
else
TSDG_CMAKE_DEVELOPER = -DTSDG_WITH_TESTS=OFF -DTSDG_WERROR=OFF
endif
CORE_LIB = $(BUILD_DIR)/libtsdg_core.a
CUDA_BACKEND = $(BUILD_DIR)/pg_tsdg_cuda.so

PG_SOURCE_DIRS = src/pg src/pg/am src/pg/merge src/pg/sql src/pg/worker \
	src/pg/worker/client src/pg/worker/server
OBJS = $(patsubst %.c,%.o,$(sort $(foreach d,$(PG_SOURCE_DIRS),$(wildcard $(d)/*.c))))
DATA_built = $(EXTENSION)--$(EXTVERSION).sql
INSTALL_SQL_PARTS = $(sort $(wildcard sql/install/*.sql))

# pg_tsdg's own extension "vector": its type's functions in a shared object of
# their own (src/pg/vector/module.c says why), its control file and script
# installed only where no other "vector" extension (pgvector) is installed.
VECTOR_MODULE = pg_tsdg_vector
VECTOR_VERSION = 0.1.0+tsdg
VECTOR_OBJS = src/pg/sql/vector.o src/pg/vector/module.o

PG_CPPFLAGS = -I$(srcdir)/src/core/api $(foreach d,$(PG_SOURCE_DIRS),-I$(srcdir)/$(d))
# PostgreSQL's headers are not clean under -Wextra's unused-parameter and
# sign-compare checks; everything else is an error in developer builds.
PG_CFLAGS = -Wall -Wextra $(TSDG_WERROR_CFLAGS) -Wno-unused-parameter -Wno-sign-compare \
	-Wno-missing-field-initializers -Wno-cast-function-type $(TSDG_EXTRA_CFLAGS)
SHLIB_LINK = $(CORE_LIB) -lstdc++ -lm -lpthread -ldl $(TSDG_EXTRA_LDFLAGS) \
	-Wl,--version-script=$(BUILD_DIR)/$(MODULE_big).exports -Wl,-Bsymbolic

REGRESS = $(basename $(notdir $(sort $(wildcard test/regress/sql/*.sql))))
REGRESS_OPTS = --inputdir=test/regress --load-extension=vector --load-extension=$(EXTENSION)
EXTRA_CLEAN = $(DATA_built) $(VECTOR_MODULE)$(DLSUFFIX) results regression.diffs regression.out

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

$(DATA_built): $(INSTALL_SQL_PARTS)
	cat $^ > $@

# CMake is configured again only when the options change; the module is
# relinked only when the core library changed.
TSDG_CMAKE_ARGS = -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(TSDG_CMAKE_DEVELOPER) $(TSDG_CMAKE_OPTIONS)
$(BUILD_DIR)/cmake-args: FORCE
	@mkdir -p $(BUILD_DIR)
	@echo '$(TSDG_CMAKE_ARGS)' | cmp -s - $@ || echo '$(TSDG_CMAKE_ARGS)' > $@

$(BUILD_DIR)/CMakeCache.txt: $(BUILD_DIR)/cmake-args
	cmake -S $(srcdir) -B $(BUILD_DIR) $(TSDG_CMAKE_ARGS) >/dev/null

.PHONY: FORCE core check-unit
core $(CORE_LIB): $(BUILD_DIR)/CMakeCache.txt FORCE
	@cmake --build $(BUILD_DIR) -j$(shell nproc)

check-unit:
	$(MAKE) TSDG_DEVELOPER=1 core
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(shell nproc)
# PGXS tracks no header dependencies unless PostgreSQL was configured with
# --enable-depend: rebuild the glue when a header it includes changes.
$(OBJS): $(foreach d,$(PG_SOURCE_DIRS),$(wildcard $(d)/*.h)) src/core/api/tsdg_capi.h
$(shlib): $(CORE_LIB) $(BUILD_DIR)/$(MODULE_big).exports

# Each shared object exports only its SQL-callable functions and what
# PostgreSQL looks up by name (scripts/export_list.sh says why); -Bsymbolic
# binds its calls to its own functions even where another module loaded
# earlier exports the same names. pg_tsdg.so links the vector type's code for
# the index's own use but exports none of it.
$(BUILD_DIR)/$(MODULE_big).exports: $(OBJS) scripts/export_list.sh
	@mkdir -p $(BUILD_DIR)
	scripts/export_list.sh $@ $(filter-out $(VECTOR_OBJS),$(OBJS))
$(BUILD_DIR)/$(VECTOR_MODULE).exports: $(VECTOR_OBJS) scripts/export_list.sh
	@mkdir -p $(BUILD_DIR)
	scripts/export_list.sh $@ $(VECTOR_OBJS)

all: $(VECTOR_MODULE)$(DLSUFFIX)
$(VECTOR_MODULE)$(DLSUFFIX): $(VECTOR_OBJS) $(CORE_LIB) $(BUILD_DIR)/$(VECTOR_MODULE).exports
	$(CC) $(CFLAGS) -shared -o $@ $(VECTOR_OBJS) $(LDFLAGS) $(LDFLAGS_SL) $(CORE_LIB) \
		-lstdc++ -lm -Wl,--version-script=$(BUILD_DIR)/$(VECTOR_MODULE).exports -Wl,-Bsymbolic

install: install-cuda-backend install-vector
.PHONY: install-cuda-backend install-vector uninstall-vector
install-cuda-backend:
	if [ -f $(CUDA_BACKEND) ]; then \
		$(INSTALL_SHLIB) $(CUDA_BACKEND) '$(DESTDIR)$(pkglibdir)/pg_tsdg_cuda.so'; \
	fi

# Never over pgvector: a vector.control that does not name pg_tsdg_vector is
# another extension's, and pg_tsdg then builds on that one.
VECTOR_CONTROL = '$(DESTDIR)$(datadir)/extension/vector.control'
install-vector: $(VECTOR_MODULE)$(DLSUFFIX)
	$(INSTALL_SHLIB) $(VECTOR_MODULE)$(DLSUFFIX) '$(DESTDIR)$(pkglibdir)/$(VECTOR_MODULE)$(DLSUFFIX)'
	@if [ -f $(VECTOR_CONTROL) ] && ! grep -q '$(VECTOR_MODULE)' $(VECTOR_CONTROL); then \
		echo "pg_tsdg: another extension \"vector\" (pgvector) is installed: not replacing it, pg_tsdg uses its type"; \
	else \
		$(INSTALL_DATA) sql/vector/vector.control $(VECTOR_CONTROL) && \
		$(INSTALL_DATA) sql/vector/vector.sql '$(DESTDIR)$(datadir)/extension/vector--$(VECTOR_VERSION).sql'; \
	fi

uninstall: uninstall-vector
uninstall-vector:
	rm -f '$(DESTDIR)$(pkglibdir)/$(VECTOR_MODULE)$(DLSUFFIX)' \
		'$(DESTDIR)$(datadir)/extension/vector--$(VECTOR_VERSION).sql'
	if grep -qs '$(VECTOR_MODULE)' $(VECTOR_CONTROL); then rm -f $(VECTOR_CONTROL); fi

clean: clean-core
.PHONY: clean-core
clean-core:
	rm -rf $(BUILD_DIR)
