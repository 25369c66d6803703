//! Column buffers handed to Python as typed records, one class per Arrow layout, read by
//! name in `dissector/wire/native.py` (`arrow_column`), which builds Arrow arrays from
//! the buffers as they are. The pairs table's column names are `PairColumn::name`
//! (generated from `schema.COLUMNS`) and the model's extract columns; the analytics
//! tables' are their contracts' (`table_model`).

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::kafka::model::Model as SpecModel;
use crate::rows::columns::PairColumn;
use crate::rows::tables::{Column, TableColumns, TableCounters};
use crate::rows::{ColumnRef, Dict, DictList, Nullable, RowBuilder};

/// int64 values (little-endian), Arrow's validity bitmap (None: no nulls). `values` is
/// `bytes`, or an `Int64Buffer` where the core hands over values it no longer needs.
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct Int64Column {
    values: Py<PyAny>,
    validity: Option<Py<PyBytes>>,
    null_count: usize,
}

/// float64 values (little-endian), Arrow's validity bitmap (None: no nulls).
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct Float64Column {
    values: Py<PyBytes>,
    validity: Option<Py<PyBytes>>,
    null_count: usize,
}

/// Booleans as a bitmap of `length` bits, Arrow's validity bitmap (None: no nulls).
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct BoolColumn {
    values: Py<PyBytes>,
    validity: Option<Py<PyBytes>>,
    null_count: usize,
    length: usize,
}

/// Dictionary-encoded strings: int32 indices into the words (an Arrow string array:
/// int32 offsets and UTF-8 data), Arrow's validity bitmap (None: no nulls).
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct DictColumn {
    indices: Py<PyBytes>,
    validity: Option<Py<PyBytes>>,
    null_count: usize,
    word_offsets: Py<PyBytes>,
    word_data: Py<PyBytes>,
}

/// A list of strings per row: int32 offsets into `items`, int32 indices into the words.
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct StrListColumn {
    offsets: Py<PyBytes>,
    items: Py<PyBytes>,
    word_offsets: Py<PyBytes>,
    word_data: Py<PyBytes>,
}

/// A list of int64 per row: int32 offsets into `values`.
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct Int64ListColumn {
    offsets: Py<PyBytes>,
    values: Py<PyBytes>,
}

/// int64 values the core built and hands over, lent to Python as they are through the
/// buffer protocol (read-only, little-endian bytes; `len()` counts bytes, as for
/// `bytes`): Arrow wraps them without a copy (`pa.py_buffer`) and keeps this object for
/// as long as an array uses them. Copied into `bytes`, the analytics tables' columns
/// cost a copy and the fresh pages' faults of every batch (a long-poll capture's
/// partitions table has about 25 int64 columns of 250,000 rows).
#[pyclass(frozen, module = "dissector._core")]
pub struct Int64Buffer {
    values: Vec<i64>,
}

impl Int64Buffer {
    fn new(mut values: Vec<i64>) -> Self {
        for v in &mut values {
            *v = v.to_le(); // nothing to do on a little-endian machine
        }
        Int64Buffer { values }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the slice covers exactly the vector's initialised values; u8 has no
        // alignment requirement and every byte is a valid u8.
        unsafe {
            std::slice::from_raw_parts(
                self.values.as_ptr().cast::<u8>(),
                std::mem::size_of_val(self.values.as_slice()),
            )
        }
    }
}

#[pymethods]
impl Int64Buffer {
    /// # Safety
    /// Called by Python with a `Py_buffer` to fill (the buffer protocol).
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let bytes = slf.get().bytes();
        let len = ffi::Py_ssize_t::try_from(bytes.len())
            .map_err(|_| PyRuntimeError::new_err("buffer too large"))?;
        // SAFETY: `view` is the caller's; the bytes live in this frozen object, which
        // `PyBuffer_FillInfo` holds (view->obj) until the buffer is released. Read-only:
        // a writable request is refused with BufferError.
        let filled = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                bytes.as_ptr().cast_mut().cast::<c_void>(),
                len,
                1,
                flags,
            )
        };
        if filled == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.bytes().len()
    }
}

/// Arrow's validity bitmap (bit i of byte i/8 set when row i is valid, least
/// significant bit first), and the null count; None when nothing is null.
fn validity(valid: &[bool]) -> (Option<Vec<u8>>, usize) {
    let nulls = valid.iter().filter(|v| !**v).count();
    if nulls == 0 {
        return (None, 0);
    }
    (Some(bits(valid)), nulls)
}

/// Bit i of byte i/8 set when `set[i]`, least significant bit first (Arrow's layout).
fn bits(set: &[bool]) -> Vec<u8> {
    // Eight flags folded into a byte, with no branch a flag.
    set.chunks(8)
        .map(|flags| {
            let flags = flags.iter().enumerate();
            flags.fold(0u8, |byte, (i, &set)| byte | (u8::from(set) << i))
        })
        .collect()
}

fn bytes(py: Python<'_>, b: &[u8]) -> Py<PyBytes> {
    PyBytes::new(py, b).unbind()
}

/// Values as one bytes object of their little-endian bytes, written in place (one copy).
fn le_bytes<T: Copy>(
    py: Python<'_>,
    values: &[T],
    to_bytes: impl Fn(T) -> [u8; 8],
) -> PyResult<Py<PyBytes>> {
    let b = PyBytes::new_with(py, values.len() * 8, |buf| {
        for (chunk, v) in buf.chunks_exact_mut(8).zip(values) {
            chunk.copy_from_slice(&to_bytes(*v));
        }
        Ok(())
    })?;
    Ok(b.unbind())
}

fn i32_bytes(values: impl Iterator<Item = i32>) -> Vec<u8> {
    values.flat_map(|v| v.to_le_bytes()).collect()
}

/// A dictionary's words as an Arrow string array: (offsets, data).
fn words(py: Python<'_>, words: &[String]) -> (Py<PyBytes>, Py<PyBytes>) {
    let mut offsets = Vec::with_capacity(words.len() + 1);
    let mut data = Vec::new();
    offsets.push(0i32);
    for w in words {
        data.extend_from_slice(w.as_bytes());
        offsets.push(i32::try_from(data.len()).unwrap_or(i32::MAX));
    }
    (bytes(py, &i32_bytes(offsets.into_iter())), bytes(py, &data))
}

fn int64(py: Python<'_>, col: &Nullable<i64>) -> PyResult<Py<PyAny>> {
    let values = le_bytes(py, &col.values, i64::to_le_bytes)?.into_any();
    int64_column(py, values, &col.valid)
}

/// A column the core no longer needs: its values handed over without a copy.
fn owned_int64(py: Python<'_>, col: Nullable<i64>) -> PyResult<Py<PyAny>> {
    let values = Py::new(py, Int64Buffer::new(col.values))?.into_any();
    int64_column(py, values, &col.valid)
}

fn int64_column(py: Python<'_>, values: Py<PyAny>, valid: &[bool]) -> PyResult<Py<PyAny>> {
    let (valid, null_count) = validity(valid);
    let column = Int64Column {
        values,
        validity: valid.map(|v| bytes(py, &v)),
        null_count,
    };
    Ok(Py::new(py, column)?.into_any())
}

fn float64(py: Python<'_>, col: &Nullable<f64>) -> PyResult<Py<PyAny>> {
    let (valid, null_count) = validity(&col.valid);
    let column = Float64Column {
        values: le_bytes(py, &col.values, f64::to_le_bytes)?,
        validity: valid.map(|v| bytes(py, &v)),
        null_count,
    };
    Ok(Py::new(py, column)?.into_any())
}

fn boolean(py: Python<'_>, col: &Nullable<bool>) -> PyResult<Py<PyAny>> {
    let (valid, null_count) = validity(&col.valid);
    let column = BoolColumn {
        values: bytes(py, &bits(&col.values)),
        validity: valid.map(|v| bytes(py, &v)),
        null_count,
        length: col.values.len(),
    };
    Ok(Py::new(py, column)?.into_any())
}

fn dictionary(py: Python<'_>, col: &Dict) -> PyResult<Py<PyAny>> {
    let valid: Vec<bool> = col.indices.iter().map(|i| *i >= 0).collect();
    let (valid, null_count) = validity(&valid);
    let (word_offsets, word_data) = words(py, &col.words);
    let column = DictColumn {
        indices: bytes(py, &i32_bytes(col.indices.iter().map(|i| (*i).max(0)))),
        validity: valid.map(|v| bytes(py, &v)),
        null_count,
        word_offsets,
        word_data,
    };
    Ok(Py::new(py, column)?.into_any())
}

fn str_list(py: Python<'_>, col: &DictList) -> PyResult<Py<PyAny>> {
    let (word_offsets, word_data) = words(py, &col.items.words);
    let column = StrListColumn {
        offsets: bytes(py, &i32_bytes(col.offsets.iter().copied())),
        items: bytes(py, &i32_bytes(col.items.indices.iter().copied())),
        word_offsets,
        word_data,
    };
    Ok(Py::new(py, column)?.into_any())
}

fn int64_list(py: Python<'_>, offsets: &[i32], values: &[i64]) -> PyResult<Py<PyAny>> {
    let column = Int64ListColumn {
        offsets: bytes(py, &i32_bytes(offsets.iter().copied())),
        values: le_bytes(py, values, i64::to_le_bytes)?,
    };
    Ok(Py::new(py, column)?.into_any())
}

/// Rows built so far as {column name: column buffer}, in the pairs table's order, the
/// model's extract columns last.
pub fn pair_columns<'py>(
    py: Python<'py>,
    rows: &RowBuilder,
    model: &SpecModel,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for c in PairColumn::ALL {
        let column = match rows.column(c) {
            ColumnRef::Int(col) => int64(py, col)?,
            ColumnRef::Float(col) => float64(py, col)?,
            ColumnRef::Str(col) => dictionary(py, col)?,
            ColumnRef::StrList(col) => str_list(py, col)?,
        };
        out.set_item(c.name(), column)?;
    }
    for (e, col) in model.extracts.iter().zip(&rows.extracts) {
        out.set_item(&e.column, int64(py, col)?)?;
    }
    Ok(out)
}

/// One analytics table's rows taken in one batch: its column buffers by name in its
/// contract's order (`dissector.tables_schema`), how many rows they hold, and what the
/// table counted since the last batch (`df.attrs["counters"]`). Read by
/// `dissector/wire/tables.py` (`TableCollector.add`).
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct TableBuffers {
    rows: usize,
    columns: Py<PyDict>,
    counters: BTreeMap<String, u64>,
}

/// The analytics tables' rows taken in one batch (`Analyzer.take_tables`), and how many
/// pairs' facts were asked of the Python decoder meanwhile (`deferred_pairs`).
#[pyclass(frozen, get_all, module = "dissector._core")]
pub struct TablesBatch {
    partitions: Py<TableBuffers>,
    groups: Py<TableBuffers>,
    versions: Py<TableBuffers>,
    deferred_pairs: u64,
}

fn table_buffers(
    py: Python<'_>,
    table: TableColumns,
    counters: &BTreeMap<&'static str, u64>,
) -> PyResult<Py<TableBuffers>> {
    let columns = PyDict::new(py);
    for (name, column) in table.columns {
        let column = match column {
            Column::I64(c) => owned_int64(py, c)?,
            Column::F64(c) => float64(py, &c)?,
            Column::Str(c) => dictionary(py, &c)?,
            Column::Bool(c) => boolean(py, &c)?,
            Column::I64List { offsets, values } => int64_list(py, &offsets, &values)?,
        };
        columns.set_item(name, column)?;
    }
    let buffers = TableBuffers {
        rows: table.len,
        columns: columns.unbind(),
        counters: counters
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect(),
    };
    Py::new(py, buffers)
}

/// The tables `TableSink::take` built and the counters taken with them, as one record.
pub fn tables_batch(
    py: Python<'_>,
    taken: [(&'static str, TableColumns); 3],
    counters: &TableCounters,
) -> PyResult<TablesBatch> {
    // By name, not by place: the sink and this record must agree on which is which.
    let mut partitions = None;
    let mut groups = None;
    let mut versions = None;
    for (name, table) in taken {
        let (slot, counted) = match name {
            "partitions" => (&mut partitions, &counters.partitions),
            "groups" => (&mut groups, &counters.groups),
            "versions" => (&mut versions, &counters.versions),
            other => return Err(PyRuntimeError::new_err(format!("unknown table {other}"))),
        };
        *slot = Some(table_buffers(py, table, counted)?);
    }
    let missing = |name: &str| PyRuntimeError::new_err(format!("no {name} table taken"));
    Ok(TablesBatch {
        partitions: partitions.ok_or_else(|| missing("partitions"))?,
        groups: groups.ok_or_else(|| missing("groups"))?,
        versions: versions.ok_or_else(|| missing("versions"))?,
        deferred_pairs: counters.deferred,
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Int64Column>()?;
    m.add_class::<Float64Column>()?;
    m.add_class::<BoolColumn>()?;
    m.add_class::<DictColumn>()?;
    m.add_class::<StrListColumn>()?;
    m.add_class::<Int64ListColumn>()?;
    m.add_class::<Int64Buffer>()?;
    m.add_class::<TableBuffers>()?;
    m.add_class::<TablesBatch>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::bits;

    #[test]
    fn bits_are_arrows_layout() {
        // every length across a byte boundary, flags in a pattern that is not periodic in 8
        for len in 0usize..40 {
            let set: Vec<bool> = (0..len).map(|i| (i * i + i / 3) % 5 < 2).collect();
            let mut want = vec![0u8; len.div_ceil(8)];
            for (i, &v) in set.iter().enumerate() {
                if v {
                    want[i / 8] |= 1 << (i % 8);
                }
            }
            assert_eq!(bits(&set), want, "length {len}");
        }
    }
}
