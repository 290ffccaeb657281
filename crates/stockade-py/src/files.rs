//! File operations on a sandbox, and unpacking on the host what `download` brought
//! out of it (by `stockade::archive::unpack_on_host`, the rule the CLI applies too).

use std::path::PathBuf;

use pyo3::prelude::*;
use stockade::{Error, Sandbox};

use crate::errors::{json, to_py};
use crate::runtime::{Bytes, drive};

/// The file operations of one sandbox handle (its approval policy applies).
#[pyclass(frozen, module = "stockade._native")]
pub struct Files {
    sb: Sandbox,
}

impl Files {
    pub fn new(sb: Sandbox) -> Files {
        Files { sb }
    }
}

#[pymethods]
impl Files {
    /// Writes a file (parents created).
    #[pyo3(signature = (path, data, asynchronous=false))]
    fn write(
        &self,
        py: Python<'_>,
        path: String,
        data: Vec<u8>,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            sb.write(&path, data).await.map_err(to_py)
        })
    }

    /// Reads a whole file.
    #[pyo3(signature = (path, asynchronous=false))]
    fn read(&self, py: Python<'_>, path: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            Ok(Bytes(sb.read(&path).await.map_err(to_py)?))
        })
    }

    /// Replaces `old` by `new`; returns the number of replacements.
    #[pyo3(signature = (path, old, new, replace_all, asynchronous=false))]
    fn edit(
        &self,
        py: Python<'_>,
        path: String,
        old: String,
        new: String,
        replace_all: bool,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            sb.edit(&path, &old, &new, replace_all).await.map_err(to_py)
        })
    }

    /// A directory's entries as JSON.
    #[pyo3(signature = (path, asynchronous=false))]
    fn ls(&self, py: Python<'_>, path: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            json(&sb.ls(&path).await.map_err(to_py)?)
        })
    }

    /// One path's entry as JSON.
    #[pyo3(signature = (path, asynchronous=false))]
    fn stat(&self, py: Python<'_>, path: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            json(&sb.stat(&path).await.map_err(to_py)?)
        })
    }

    /// Paths below `root` matching `pattern`.
    #[pyo3(signature = (pattern, root, asynchronous=false))]
    fn glob(
        &self,
        py: Python<'_>,
        pattern: String,
        root: String,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            sb.glob(&pattern, &root).await.map_err(to_py)
        })
    }

    /// Matching lines below `root` as JSON.
    #[pyo3(signature = (regex, root, include=None, max_matches=0, asynchronous=false))]
    fn grep(
        &self,
        py: Python<'_>,
        regex: String,
        root: String,
        include: Option<String>,
        max_matches: u32,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            let m = sb
                .grep(&regex, &root, include.as_deref(), max_matches)
                .await
                .map_err(to_py)?;
            json(&m)
        })
    }

    /// Creates a directory and its parents.
    #[pyo3(signature = (path, asynchronous=false))]
    fn mkdir(&self, py: Python<'_>, path: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            sb.mkdir(&path).await.map_err(to_py)
        })
    }

    /// Sets `user.` extended attributes of a path.
    #[pyo3(signature = (path, xattrs, asynchronous=false))]
    fn set_xattrs(
        &self,
        py: Python<'_>,
        path: String,
        xattrs: std::collections::BTreeMap<String, String>,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            sb.set_xattrs(&path, xattrs).await.map_err(to_py)
        })
    }

    /// Removes a file or directory tree.
    #[pyo3(signature = (path, asynchronous=false))]
    fn rm(&self, py: Python<'_>, path: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            sb.rm(&path).await.map_err(to_py)
        })
    }

    /// Unpacks a tar (or tar.gz) archive into `dest` in the sandbox.
    #[pyo3(signature = (dest, archive, asynchronous=false))]
    fn upload(
        &self,
        py: Python<'_>,
        dest: String,
        archive: Vec<u8>,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            sb.upload(&dest, archive).await.map_err(to_py)
        })
    }

    /// Packs a file or directory of the sandbox into a tar archive.
    #[pyo3(signature = (path, asynchronous=false))]
    fn download(&self, py: Python<'_>, path: String, asynchronous: bool) -> PyResult<Py<PyAny>> {
        let sb = self.sb.clone();
        drive(py, asynchronous, async move {
            Ok(Bytes(sb.download(&path).await.map_err(to_py)?))
        })
    }
}

/// Unpacks `archive`, which came out of a sandbox, into the host directory `dest`
/// (`stockade::archive::unpack_on_host`: refused whole unless every entry is safe).
#[pyfunction]
#[pyo3(signature = (archive, dest, asynchronous=false))]
pub fn unpack_on_host(
    py: Python<'_>,
    archive: Vec<u8>,
    dest: PathBuf,
    asynchronous: bool,
) -> PyResult<Py<PyAny>> {
    drive(py, asynchronous, async move {
        tokio::task::spawn_blocking(move || stockade::archive::unpack_on_host(&archive, &dest))
            .await
            .map_err(|e| to_py(Error::Internal(format!("unpacking task: {e}"))))?
            .map_err(to_py)
    })
}
