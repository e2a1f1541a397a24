//! Escape attempts and functional checks per sandbox backend (filled in next).
