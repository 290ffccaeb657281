//! Depended on by the workspace crates for its dependencies' features alone
//! (`cargo hakari`): every build of any set of them compiles each shared
//! dependency once, with one set of features. See ARCHITECTURE.md, "Builds".
