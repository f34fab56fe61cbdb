"""omni.save_image and omni.save_video over the C++ writers."""

import numpy as np
import pytest

import omni


def gradient(frames=3, height=16, width=32):
    y, x = np.meshgrid(np.linspace(0, 1, height), np.linspace(0, 1, width), indexing="ij")
    image = np.stack([x, y, 1 - x], axis=-1).astype(np.float32)
    return np.stack([np.roll(image, i, axis=1) for i in range(frames)])


def test_float_frames_round_trip_every_uint8_value(tmp_path):
    values = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1).repeat(3, axis=-1)
    as_float = values.astype(np.float32) / np.float32(255)  # what generate returns
    omni.save_image(as_float, tmp_path / "f.png")
    omni.save_image(values, tmp_path / "u.png")
    assert (tmp_path / "f.png").read_bytes() == (tmp_path / "u.png").read_bytes()


def test_save_image_one_frame_sheet_and_pattern(tmp_path):
    PIL = pytest.importorskip("PIL.Image")
    frames = gradient()
    assert omni.save_image(frames[0], tmp_path / "one.png") == [tmp_path / "one.png"]
    assert PIL.open(tmp_path / "one.png").size == (32, 16)
    omni.save_image(frames, tmp_path / "sheet.png")
    assert PIL.open(tmp_path / "sheet.png").size == (64, 32)  # 3 frames in a 2x2 grid
    written = omni.save_image(frames, tmp_path / "f_%02d.png")
    assert [p.name for p in written] == ["f_00.png", "f_01.png", "f_02.png"]
    first = np.asarray(PIL.open(written[0]))
    assert np.array_equal(first, np.rint(frames[0] * 255).astype(np.uint8))


def test_save_image_takes_pil_images_and_torch_tensors(tmp_path):
    PIL = pytest.importorskip("PIL.Image")
    frames = gradient()
    omni.save_image(frames, tmp_path / "np.png")
    omni.save_image([PIL.fromarray(np.rint(f * 255).astype(np.uint8)) for f in frames], tmp_path / "pil.png")
    assert (tmp_path / "np.png").read_bytes() == (tmp_path / "pil.png").read_bytes()
    torch = pytest.importorskip("torch")
    omni.save_image(torch.from_numpy(frames), tmp_path / "pt.png")
    assert (tmp_path / "np.png").read_bytes() == (tmp_path / "pt.png").read_bytes()


def test_save_video_writes_an_mp4(tmp_path):
    written = omni.save_video(gradient(frames=5), tmp_path / "clip.mp4", fps=8)
    assert written == [tmp_path / "clip.mp4"]
    assert (tmp_path / "clip.mp4").read_bytes()[4:8] == b"ftyp"


def test_bad_frames_and_paths_are_format_errors(tmp_path):
    with pytest.raises(omni.FormatError, match="shape"):
        omni.save_image(np.zeros((2, 8, 8, 4), np.float32), tmp_path / "x.png")
    with pytest.raises(omni.FormatError, match="NaN"):
        omni.save_image(np.full((8, 8, 3), np.nan, np.float32), tmp_path / "x.png")
    with pytest.raises(omni.FormatError, match="int64"):
        omni.save_image(np.zeros((8, 8, 3), np.int64), tmp_path / "x.png")
    with pytest.raises(omni.FormatError, match="save_video"):
        omni.save_image(gradient(), tmp_path / "x.mp4")
    with pytest.raises(omni.FormatError, match=".mp4"):
        omni.save_video(gradient(), tmp_path / "x.avi")
    with pytest.raises(omni.FormatError, match="fps"):
        omni.save_video(gradient(), tmp_path / "x.mp4", fps=0)
    with pytest.raises(omni.FormatError):
        omni.save_image(gradient(), tmp_path / "x.bmp")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(omni.FormatError, match="a-file"):
        omni.save_image(gradient(), tmp_path / "a-file" / "x.png")
    # A bad frame pattern is a ConfigError, as in the library and the CLI (exit 2).
    for bad in ("f_%s.png", "f_%d_%d.png", "f_%n.png", "f_%-5d.png"):
        with pytest.raises(omni.ConfigError, match="exactly one %d"):
            omni.save_image(gradient(), tmp_path / bad)
        assert not list(tmp_path.glob("f_*")), bad
    written = omni.save_image(gradient(frames=1), tmp_path / "new-dir" / "x.png")
    assert written == [tmp_path / "new-dir" / "x.png"] and written[0].exists()
