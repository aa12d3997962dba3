# The two commands of the README:   make run    (set up, then the main job)
#                                   make test   (set up, then the whole test suite)
BUILD_DIR ?= build
export KESTREL_BUILD_DIR := $(BUILD_DIR)

.PHONY: setup run test
setup:
	@scripts/setup.sh

# The main job: train yolov5n from scratch on the bundled demo dataset (a GPU when there is one, else the CPU).
run: setup
	$(BUILD_DIR)/kestrel train --cfg yolov5n --data data/demo/demo.yaml --hyp configs/hyps/hyp.scratch-low.yaml \
		--epochs 3 --img 320 --batch-size 16 --workers 2 --name demo

test: setup
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j 2
