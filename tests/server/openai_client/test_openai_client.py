"""The official openai Python client against a real `omni serve` (./run
starts it and passes its address): images.generate, then the video calls
videos.create (multipart/form-data, as the client sends it), retrieve until
completed, download_content, list (two pages), delete, and the errors a
client sees for requests this server refuses."""

import base64
import os
import time

import openai
import pytest

BASE_URL = os.environ["OMNI_BASE_URL"]
API_KEY = os.environ["OMNI_API_KEY"]
MODEL = os.environ["OMNI_MODEL"]


@pytest.fixture(scope="module")
def client():
    return openai.OpenAI(api_key=API_KEY, base_url=BASE_URL, max_retries=0, timeout=120)


def until_finished(client, video_id, seconds=120):
    deadline = time.monotonic() + seconds
    while True:
        video = client.videos.retrieve(video_id)
        if video.status in ("completed", "failed"):
            return video
        assert time.monotonic() < deadline, f"video {video_id} still {video.status}"
        time.sleep(0.05)


def create(client, prompt):
    # OpenAI's fields, plus vllm-omni's num_inference_steps as an extra form
    # field (small and quick on the built-in example model).
    return client.videos.create(
        model=MODEL,
        prompt=prompt,
        seconds="4",
        size="32x32",
        extra_body={"num_inference_steps": "2"},
    )


def test_images_generate_returns_a_png_per_image(client):
    result = client.images.generate(
        model=MODEL, prompt="a red circle", size="32x32", n=2,
        extra_body={"num_inference_steps": 2, "seed": 11})
    assert len(result.data) == 2
    for image in result.data:
        png = base64.b64decode(image.b64_json)
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
        assert (width, height) == (32, 32)
    assert result.data[0].b64_json != result.data[1].b64_json


def test_video_lifecycle(client):
    created = create(client, "a red circle moving right")
    assert created.object == "video"
    assert created.status == "queued"
    assert created.model == MODEL
    assert created.size == "32x32"
    assert created.id.startswith("video_") and len(created.id) == len("video_") + 32
    extra = created.model_extra or {}
    # 4 s became a frame count the model takes (4k+1), and the reply says so.
    assert extra["num_frames"] % 4 == 1
    assert abs(float(created.seconds) - 4) <= 4 / extra["fps"]
    assert 0 <= extra["seed"] < 2**53

    done = until_finished(client, created.id)
    assert done.status == "completed", done.error
    assert done.progress == 100
    assert done.completed_at >= done.created_at

    content = client.videos.download_content(created.id)
    assert content.response.headers["content-type"] == "video/mp4"
    mp4 = content.read()
    assert len(mp4) > 100
    assert mp4[4:8] == b"ftyp"

    second = create(client, "a blue square")
    until_finished(client, second.id)
    # limit 1: the client follows the cursor (after = last id) to the next page.
    first_page = client.videos.list(limit=1)
    assert len(first_page.data) == 1
    listed = [video.id for video in client.videos.list(limit=1)]
    assert listed[:2] == [second.id, created.id]

    deleted = client.videos.delete(created.id)
    assert deleted.id == created.id
    assert deleted.deleted is True
    with pytest.raises(openai.NotFoundError) as missing:
        client.videos.retrieve(created.id)
    assert missing.value.code == "video_not_found"


def test_refused_requests_raise_the_clients_typed_errors(client):
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        client.videos.create(
            model=MODEL, prompt="x",
            input_reference=("ref.png", b"not an image", "image/png"))
    assert refused.value.code == "unsupported_parameter"

    wrong_key = openai.OpenAI(api_key="wrong", base_url=BASE_URL, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong_key.videos.list()
