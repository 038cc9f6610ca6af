//! What every server shares: how much it reads per call.

/// How much every server reads per call: deferloop's read buffer size (also
/// asyncio's and uvloop's), given to the others so all make the same calls.
pub const READ_SIZE: usize = 256 * 1024;
