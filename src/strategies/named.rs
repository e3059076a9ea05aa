//! `named!`, the declaration of a closed set of settings a person names (the command line's
//! values, Python's strings, run files' words) with its `FromStr` and `Display`.

/// Declares a closed set of named settings with its `FromStr` and `Display`.
macro_rules! named {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident => $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $s)] $v),+ }

        impl $name {
            /// The name users type.
            pub fn name(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> std::result::Result<Self, String> {
                [$($name::$v),+].into_iter().find(|k| k.name() == s).ok_or_else(|| {
                    let known: Vec<&str> = [$($s),+].to_vec();
                    format!("unknown {} `{s}`; expected one of: {}", stringify!($name), known.join(", "))
                })
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
