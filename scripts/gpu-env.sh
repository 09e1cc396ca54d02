# Sourced by the scripts that run on a GPU machine without a Vulkan loader or a network
# (scripts/bench-dawn.sh, scripts/side-by-side.sh): unpacks the loader's .debs from .gl/
# (`scripts/side-by-side.sh prepare` downloads them), points Vulkan at NVIDIA's ICD where
# the machine has one, and sets XDG_RUNTIME_DIR (Mesa and wgpu warn without it).
for f in .gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
ldconfig 2>/dev/null || true
J=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f $J ] && export VK_DRIVER_FILES=$J
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
