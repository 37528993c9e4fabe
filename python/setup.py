"""Builds the seedsweep binary from the repository's crate (`..`) with `cargo build --release`
and ships it inside the package as `seedsweep/bin/seedsweep`.

Environment: `CARGO` (the cargo to run, default `cargo` on PATH), `CARGO_TARGET_DIR` (honoured
by cargo), `SEEDSWEEP_CRATE` (the crate's directory, default the parent of this file).
"""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent


class BuildWithBinary(build_py):
    def run(self):
        super().run()
        crate = Path(os.environ.get("SEEDSWEEP_CRATE", HERE.parent)).resolve()
        manifest = crate / "Cargo.toml"
        if not manifest.is_file():
            raise SystemExit(f"seedsweep: no Cargo.toml at {crate} (set SEEDSWEEP_CRATE to the crate's directory)")
        cargo = os.environ.get("CARGO") or shutil.which("cargo")
        if not cargo:
            raise SystemExit("seedsweep: building the package needs the Rust toolchain (cargo on PATH; https://rustup.rs)")
        subprocess.run([cargo, "build", "--release", "--locked", "--bin", "seedsweep",
                        "--manifest-path", str(manifest)], check=True)
        meta = subprocess.run([cargo, "metadata", "--format-version", "1", "--no-deps",
                               "--manifest-path", str(manifest)],
                              check=True, capture_output=True, text=True).stdout
        import json
        target = Path(json.loads(meta)["target_directory"])
        exe = target / "release" / ("seedsweep.exe" if os.name == "nt" else "seedsweep")
        dest = Path(self.build_lib) / "seedsweep" / "bin"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(exe, dest / exe.name)
        os.chmod(dest / exe.name, 0o755)


class BinaryDistribution(Distribution):
    """The wheel carries a native executable: platform-tagged, not pure."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithBinary}, distclass=BinaryDistribution)
