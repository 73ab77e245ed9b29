//! A policy folder mounted the way the kubelet mounts a ConfigMap: each
//! key a symlink through `..data`, and an update a new payload directory
//! swapped in by renaming the `..data` symlink.
use std::os::unix::fs::symlink;
use std::path::Path;

/// Writes generation `generation` of the ConfigMap (its keys `files`) and
/// swaps `..data` to it, as the kubelet does; none: the ConfigMap was
/// emptied.
pub fn publish_files(volume: &Path, generation: u32, files: &[(&str, &str)]) {
    let payload = volume.join(format!("..2026_11_29_{generation:02}"));
    std::fs::create_dir(&payload).unwrap();
    for (name, text) in files {
        std::fs::write(payload.join(name), text).unwrap();
    }
    let tmp = volume.join("..data_tmp");
    symlink(payload.file_name().unwrap(), &tmp).unwrap();
    std::fs::rename(&tmp, volume.join("..data")).unwrap();
    for (name, _) in files {
        if std::fs::symlink_metadata(volume.join(name)).is_err() {
            symlink(format!("..data/{name}"), volume.join(name)).unwrap();
        }
    }
}
