"""A toy model as one zip archive (the folder `save_toy` writes: model.safetensors and config.json, which holds the
vocabulary), to download from the Train page and to upload back. Reading takes only those two files, no larger
than the caps allow, and loads them as `load_toy_folder` does: safetensors, never a pickle."""

from __future__ import annotations

import io
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath

import torch

from attention_atlas.model.core.errors import UserError
from attention_atlas.model.toy.store import CONFIG_FILE, WEIGHTS_FILE, ToyModel, load_toy_folder, save_toy

MAX_ARCHIVE_BYTES = 64 * 2**20  # an archive, and the files in it unpacked (the largest toy model allowed is ~20 MB)
MAX_CONFIG_BYTES = 2**20


def toy_archive(toy: ToyModel, name: str) -> bytes:
    """The zip of `toy`'s folder, its files under `name`/."""
    with tempfile.TemporaryDirectory() as folder:
        saved = save_toy(toy, Path(folder) / name)
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for file in (WEIGHTS_FILE, CONFIG_FILE):
                archive.write(saved / file, f"{name}/{file}")
    return buffer.getvalue()


def read_toy_archive(data: bytes, device: str | torch.device = "cpu") -> ToyModel:
    """The toy model in a zip archive of its folder (the files at the top, or in one folder). ValueError saying what
    is wrong with anything else."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise UserError(f"the file has {len(data) / 2**20:.0f} MB; a toy model archive has at most "
                         f"{MAX_ARCHIVE_BYTES // 2**20} MB")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as error:
        raise UserError("the file is not a zip archive: download a model from the Train page to see the format") \
            from error
    with archive, tempfile.TemporaryDirectory() as folder:
        for wanted, most in ((WEIGHTS_FILE, MAX_ARCHIVE_BYTES), (CONFIG_FILE, MAX_CONFIG_BYTES)):
            members = [m for m in archive.infolist() if PurePosixPath(m.filename).name == wanted
                       and len(PurePosixPath(m.filename).parts) <= 2 and not m.is_dir()]
            if len(members) != 1:
                raise UserError(f"the archive must hold one {wanted} (at its top or in one folder); it holds "
                                 f"{len(members)}")
            if members[0].file_size > most:
                raise UserError(f"{wanted} would unpack to {members[0].file_size / 2**20:.0f} MB, over the "
                                 f"{most / 2**20:.0f} MB a toy model's may have")
            try:
                with archive.open(members[0]) as source:
                    content = source.read(most + 1)
            except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as error:
                raise UserError(f"{wanted} cannot be unpacked ({error})") from error
            if len(content) > most:
                raise UserError(f"{wanted} unpacks to more than it says")
            (Path(folder) / wanted).write_bytes(content)
        return load_toy_folder(Path(folder), device)
