"""bbox_iou maps boxes from the resized image the model saw back to the original image."""

from __future__ import annotations

import json

import pytest
from PIL import Image
from reward_factory import sample, score, traj
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize as hf_smart_resize

from mmreason.rewards.grounding import bbox_iou, box_iou, match_score, parse_boxes

GOLD = [100.0, 200.0, 600.0, 700.0]  # x1, y1, x2, y2 in original pixels


def qwen25_answer(box):
    return "<answer>" + json.dumps([{"bbox_2d": [round(v, 3) for v in box], "label": "lesion"}]) + "</answer>"


def resized(box, height, width, fed):
    sx, sy = fed[1] / width, fed[0] / height
    return [box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy]


def test_box_iou_known_values():
    assert box_iou((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(1 / 3)
    assert box_iou((0, 0, 1, 1), (2, 2, 3, 3)) == 0.0
    assert box_iou((5, 5, 1, 1), (0, 0, 10, 10)) == 0.0  # inverted box has no area


@pytest.mark.parametrize("height, width", [(500, 1000), (2000, 3000), (40, 60)])
def test_correct_box_in_resized_coordinates_scores_one(height, width):
    fed = hf_smart_resize(height, width, factor=28, min_pixels=56 * 56, max_pixels=28 * 28 * 1280)
    assert fed != (height, width)  # the processor really resized the image
    box = resized(GOLD, height, width, fed)
    assert score("bbox_iou", qwen25_answer(box), gt_boxes=GOLD, image_size=[height, width]) == pytest.approx(
        1.0, abs=1e-4
    )
    # the same numbers read as original-image pixels are off
    assert score("bbox_iou", qwen25_answer(box), gt_boxes=GOLD, kwargs={"coords": "original"}) < 0.99


def test_pixel_limits_and_explicit_resized_size():
    height, width = 2000, 3000
    fed = hf_smart_resize(height, width, factor=28, min_pixels=3136, max_pixels=256 * 28 * 28)
    box = resized(GOLD, height, width, fed)
    kwargs = {"max_pixels": 256 * 28 * 28, "min_pixels": 3136}
    assert score(
        "bbox_iou", qwen25_answer(box), gt_boxes=GOLD, image_size=[height, width], kwargs=kwargs
    ) == pytest.approx(1.0, abs=1e-4)
    given = score("bbox_iou", qwen25_answer(box), gt_boxes=GOLD, image_size=[height, width], resized_size=list(fed))
    assert given == pytest.approx(1.0, abs=1e-4)


def test_image_size_read_from_the_sample_image():
    image = Image.new("RGB", (1000, 500))  # PIL size is (width, height)
    fed = hf_smart_resize(500, 1000, factor=28, min_pixels=56 * 56, max_pixels=28 * 28 * 1280)
    s = sample(None, images=[image], gt_boxes=GOLD)
    assert bbox_iou([s], [traj(qwen25_answer(resized(GOLD, 500, 1000, fed)))])[0] == pytest.approx(1.0, abs=1e-4)


def test_qwen2_norm1000_boxes():
    height, width = 800, 1000
    box = [GOLD[0] / width * 1000, GOLD[1] / height * 1000, GOLD[2] / width * 1000, GOLD[3] / height * 1000]
    text = "<|box_start|>({:.0f},{:.0f}),({:.0f},{:.0f})<|box_end|>".format(*box)
    assert score("bbox_iou", text, gt_boxes=GOLD, image_size=[height, width], kwargs={"coords": "norm1000"}) == 1.0


def test_several_boxes_and_threshold():
    assert parse_boxes("[1, 2, 3, 4] and (5,6),(7,8)") == [(1, 2, 3, 4), (5, 6, 7, 8)]
    a, b = (0, 0, 10, 10), (20, 20, 30, 30)
    assert match_score([a, b], [a, b]) == 1.0
    assert match_score([a, b, (50, 50, 60, 60)], [a, b]) == pytest.approx(2 / 3)  # an extra box costs
    assert match_score([(0, 0, 10, 5)], [a], threshold=0.5) == 1.0  # IoU 0.5 counts as a hit
    kwargs = {"coords": "original", "threshold": 0.6}
    assert score("bbox_iou", "<answer>[0, 0, 10, 5]</answer>", gt_boxes=[a], kwargs=kwargs) == 0.0
    assert score("bbox_iou", "<answer>no box</answer>", gt_boxes=[a], kwargs={"coords": "original"}) == 0.0
    assert score("bbox_iou", "<answer>[0, 0, 10, 5]</answer>", kwargs={"coords": "original"}) is None
