# The two commands of the README:   make run    (set up, then the main job)
#                                   make test   (set up, then the whole test suite)
BUILD_DIR ?= build
export KESTREL_BUILD_DIR := $(BUILD_DIR)

.PHONY: setup run test
setup:
	@scripts/setup.sh

run: setup
	$(BUILD_DIR)/kestrel models configs/models/yolov5n.yaml configs/models/yolov5s.yaml configs/models/yolov7-tiny.yaml

test: setup
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j 2
