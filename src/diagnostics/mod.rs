//! Every figure a user sees: flow statistics and spectra of either solver ([`flow`]), the
//! vortex ring's position and speed ([`ring`]), the Lamb–Oseen profile of a tube
//! ([`lamb_oseen`]), the vortex-against-spectral comparison ([`compare`]) and the vortex
//! structures on the grid: velocity, vorticity and Q ([`structures`]). The run core's
//! writers call these; no driver computes a figure itself.

pub mod compare;
pub mod flow;
pub mod lamb_oseen;
pub mod ring;
pub mod structures;

pub use flow::{
    flow_stats, max_divergence, max_vorticity, shell_count, shell_of, shell_spectrum, FlowStats,
};
