//! The commands a person in the chat gives the bridge itself (`/stop`,
//! `/new`, `/status`, …), declared once: the word, its arguments, who may
//! use it unless the operator says otherwise, and its line of help. The
//! parser, the permission check, `/help`, the audit row and the README's
//! table all read [`COMMANDS`]; what each one does is `run::commands`'.
//!
//! A command is answered by the bridge at once and never reaches the
//! harness. Only a known word after the prefix is one: `/tmp/x is gone`
//! is a message for the harness, not a command.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer};

/// A command the bridge answers itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Command {
    /// The commands this person may use here.
    Help,
    /// What runs now, the session, the project.
    Status,
    /// The asker's own usage and what is left of the operator's budgets.
    Usage,
    /// Stop the conversation's running turn; the session is kept.
    Stop,
    /// The next message starts a fresh session.
    New,
    /// List the conversation's earlier sessions, or go back to one.
    Resume,
    /// Switch the conversation's model among the operator's.
    Model,
    /// Switch the conversation's permission mode among the operator's.
    Mode,
    /// Let the agent reach the destination its door holds, once or for
    /// the conversation.
    Allow,
    /// Refuse the destination the agent's door holds.
    Deny,
}

/// One command as the person and the operator read it.
#[derive(Debug, Clone, Copy)]
pub struct Declaration {
    /// The command.
    pub command: Command,
    /// The word after the prefix.
    pub word: &'static str,
    /// Its arguments, as help shows them (empty: none).
    pub args: &'static str,
    /// One line of help.
    pub summary: &'static str,
    /// Who may use it when the operator names no one: everyone (it only
    /// reads), or the conversation's participants (it changes something).
    pub open: bool,
}

/// Every command, in the order `/help` lists them.
pub const COMMANDS: [Declaration; 10] = [
    Declaration {
        command: Command::Help,
        word: "help",
        args: "",
        summary: "the commands you may use here",
        open: true,
    },
    Declaration {
        command: Command::Status,
        word: "status",
        args: "",
        summary: "what runs now, since when, the session, the project",
        open: true,
    },
    Declaration {
        command: Command::Usage,
        word: "usage",
        args: "",
        summary: "your usage today and this month, and what is left of any limit",
        open: true,
    },
    Declaration {
        command: Command::Stop,
        word: "stop",
        args: "",
        summary: "stop the running turn (the session is kept)",
        open: false,
    },
    Declaration {
        command: Command::New,
        word: "new",
        args: "",
        summary: "start a fresh session with your next message",
        open: false,
    },
    Declaration {
        command: Command::Resume,
        word: "resume",
        args: "[N]",
        summary: "list earlier sessions, or go back to session N",
        open: false,
    },
    Declaration {
        command: Command::Model,
        word: "model",
        args: "[NAME]",
        summary: "show or switch the model, among those the operator allows",
        open: false,
    },
    Declaration {
        command: Command::Mode,
        word: "mode",
        args: "[NAME]",
        summary: "show or switch the permission mode, among those the operator allows",
        open: false,
    },
    // Anyone may send them; only the person whose turn asked (or an
    // approver the operator named) is heard.
    Declaration {
        command: Command::Allow,
        word: "allow",
        args: "[always]",
        summary: "let the agent reach the destination it asked for: this once, or always in this conversation",
        open: true,
    },
    Declaration {
        command: Command::Deny,
        word: "deny",
        args: "",
        summary: "refuse the destination the agent asked for",
        open: true,
    },
];

impl Command {
    /// Its declaration.
    pub fn declared(self) -> &'static Declaration {
        COMMANDS
            .iter()
            .find(|d| d.command == self)
            .unwrap_or(&COMMANDS[0])
    }

    /// The word after the prefix.
    pub fn word(self) -> &'static str {
        self.declared().word
    }

    fn named(word: &str) -> Option<Command> {
        COMMANDS
            .iter()
            .find(|d| d.word.eq_ignore_ascii_case(word))
            .map(|d| d.command)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        let word = String::deserialize(de)?;
        let bare = word.trim().trim_start_matches('/');
        Command::named(bare).ok_or_else(|| {
            let words = COMMANDS.iter().map(|d| d.word);
            serde::de::Error::custom(format!(
                "unknown command `{word}`{}; the commands are {}",
                crate::settings_keys::did_you_mean(bare, words.clone()),
                words.collect::<Vec<_>>().join(", ")
            ))
        })
    }
}

/// A command as given in a message: which, and the rest of the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invocation<'a> {
    /// The command.
    pub command: Command,
    /// What followed its word, trimmed (empty: nothing).
    pub args: &'a str,
}

/// The command `text` gives, when it starts with `prefix` and a command's
/// word (any case; `/stop@bot`, as some platforms send it, too). An empty
/// prefix turns commands off.
pub fn parse<'a>(text: &'a str, prefix: &str) -> Option<Invocation<'a>> {
    if prefix.is_empty() {
        return None;
    }
    let rest = text.trim().strip_prefix(prefix)?;
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let (word, args) = rest.split_at(end);
    let word = word.split_once('@').map_or(word, |(word, _bot)| word);
    Some(Invocation {
        command: Command::named(word)?,
        args: args.trim(),
    })
}

/// Who may use a command in a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    /// Anyone who can write to the bot there.
    Everyone,
    /// People who have had a turn in the conversation (the ledger says).
    Participants,
    /// These actors (ids as the host reports them), and actors the host
    /// reports with a `role:NAME` listed here.
    Listed(Vec<String>),
    /// No one: the command is off.
    Nobody,
}

impl<'de> Deserialize<'de> for Who {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Word(String),
            List(Vec<String>),
        }
        let ids = |list: Vec<String>| -> Result<Vec<String>, D::Error> {
            list.iter()
                .map(|id| id.trim())
                .filter(|id| !id.is_empty())
                .map(|id| listed_id(id).map_err(serde::de::Error::custom))
                .collect()
        };
        Ok(match Form::deserialize(de)? {
            Form::Word(word) => match word.trim().to_ascii_lowercase().as_str() {
                "everyone" => Who::Everyone,
                "participants" => Who::Participants,
                "nobody" | "" => Who::Nobody,
                _ => Who::Listed(ids(word.split(',').map(str::to_string).collect())?),
            },
            Form::List(list) => Who::Listed(ids(list)?),
        })
    }
}

/// The words that say who without naming anyone.
const WHO_WORDS: [&str; 3] = ["everyone", "participants", "nobody"];

/// One listed actor id or `role:NAME`; `id:NAME` names an actor whose id
/// reads like a typo of a word. A typo of one of [`WHO_WORDS`] is refused:
/// taken as an id, it would let no one in and say the typo to everyone.
fn listed_id(item: &str) -> Result<String, String> {
    if let Some(id) = item.strip_prefix("id:") {
        return Ok(id.trim().to_string());
    }
    let lower = item.to_ascii_lowercase();
    let typo = WHO_WORDS.iter().find(|word| {
        let distance = strsim::damerau_levenshtein(&lower, word);
        distance <= (word.len() / 6).max(1)
    });
    match typo {
        Some(word) if lower == *word => Err(format!(
            "`{item}` is a word of its own here, not one of a list of ids: give it alone"
        )),
        Some(word) => Err(format!(
            "`{item}` is neither an actor id nor a word (did you mean `{word}`?): the words are \
             {}; an actor whose id this is: `id:{item}`",
            WHO_WORDS.join(", ")
        )),
        None => Ok(item.to_string()),
    }
}

/// What deciding on an actor came to, before the ledger is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Allowed.
    Yes,
    /// Refused.
    No,
    /// Allowed when the actor has had a turn in the conversation.
    IfParticipant,
}

impl Who {
    /// Whether `actor` (with the roles its host reports) may.
    pub fn decide(&self, actor: Option<&str>, roles: &[String]) -> Decision {
        match self {
            Who::Everyone => Decision::Yes,
            Who::Nobody => Decision::No,
            Who::Participants if actor.is_some() => Decision::IfParticipant,
            Who::Participants => Decision::No,
            Who::Listed(listed) => {
                let named = actor.is_some_and(|id| listed.iter().any(|l| l == id));
                let by_role = roles
                    .iter()
                    .any(|role| listed.iter().any(|l| l.strip_prefix("role:") == Some(role)));
                if named || by_role {
                    Decision::Yes
                } else {
                    Decision::No
                }
            }
        }
    }

    /// Who may, as a refusal says it.
    pub fn describe(&self) -> String {
        match self {
            Who::Everyone => "everyone".into(),
            Who::Participants => "people who have had a turn in this conversation".into(),
            Who::Listed(listed) => {
                format!("the people the operator listed ({})", listed.join(", "))
            }
            Who::Nobody => "no one (the operator turned it off)".into(),
        }
    }
}

/// The default prefix.
pub const DEFAULT_PREFIX: &str = "/";

fn default_prefix() -> String {
    DEFAULT_PREFIX.to_string()
}

/// The operator's settings for commands (a binding's `commands` key):
/// their prefix (`""` turns them off) and who may use each.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Access {
    /// What a command starts with.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Who may use a command, by its word; the rest keep their default.
    #[serde(default)]
    pub allow: BTreeMap<Command, Who>,
}

impl Default for Access {
    fn default() -> Self {
        Access {
            prefix: default_prefix(),
            allow: BTreeMap::new(),
        }
    }
}

impl Access {
    /// Who may use `command`.
    pub fn who(&self, command: Command) -> Who {
        match self.allow.get(&command) {
            Some(who) => who.clone(),
            None if command.declared().open => Who::Everyone,
            None => Who::Participants,
        }
    }

    /// The command `text` gives, with this prefix.
    pub fn parse<'a>(&self, text: &'a str) -> Option<Invocation<'a>> {
        parse(text, &self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_known_word_after_the_prefix_is_a_command() {
        let stop = parse("  /stop ", "/").unwrap();
        assert_eq!((stop.command, stop.args), (Command::Stop, ""));
        let resume = parse("/Resume 2", "/").unwrap();
        assert_eq!((resume.command, resume.args), (Command::Resume, "2"));
        assert_eq!(parse("/stop@my_bot", "/").unwrap().command, Command::Stop);
        assert_eq!(parse("/model  opus  ", "/").unwrap().args, "opus");
        for text in [
            "/tmp/x is gone",
            "/stopped",
            "stop",
            "please /stop",
            "/",
            "",
        ] {
            assert_eq!(parse(text, "/"), None, "{text}");
        }
        assert_eq!(
            parse("/stop", ""),
            None,
            "an empty prefix turns commands off"
        );
        assert_eq!(parse("#stop", "#").unwrap().command, Command::Stop);
    }

    #[test]
    fn a_mistyped_word_of_who_is_refused_and_an_id_may_say_it_is_one() {
        let who = |value: serde_json::Value| serde_json::from_value::<Who>(value);
        let typo = who(serde_json::json!("partcipants"))
            .unwrap_err()
            .to_string();
        assert!(
            typo.contains("did you mean `participants`?") && typo.contains("`id:partcipants`"),
            "{typo}"
        );
        assert!(who(serde_json::json!(["ann", "Everyon"])).is_err());
        assert!(who(serde_json::json!("ann, nobdy")).is_err());
        assert!(who(serde_json::json!(["ann", "everyone"])).is_err());
        assert_eq!(who(serde_json::json!("Everyone")).unwrap(), Who::Everyone);
        assert_eq!(
            who(serde_json::json!("id:partcipants, nobby, eve, 10023")).unwrap(),
            Who::Listed(vec![
                "partcipants".into(),
                "nobby".into(),
                "eve".into(),
                "10023".into()
            ])
        );
    }

    #[test]
    fn every_command_is_declared_once_with_its_own_word() {
        let mut words: Vec<_> = COMMANDS.iter().map(|d| d.word).collect();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words.len(), COMMANDS.len());
        for d in COMMANDS {
            assert_eq!(d.command.declared().word, d.word);
        }
    }

    #[test]
    fn the_operator_names_who_may_and_a_mistyped_command_says_what_was_meant() {
        let access: Access = serde_json::from_value(serde_json::json!({
            "prefix": "!",
            "allow": {"stop": "everyone", "/new": ["ann", "role:admin"], "model": "nobody"}
        }))
        .unwrap();
        assert_eq!(access.who(Command::Stop), Who::Everyone);
        assert_eq!(access.who(Command::Resume), Who::Participants);
        assert_eq!(access.who(Command::Status), Who::Everyone);
        let new = access.who(Command::New);
        assert_eq!(new.decide(Some("ann"), &[]), Decision::Yes);
        assert_eq!(new.decide(Some("bob"), &[]), Decision::No);
        assert_eq!(new.decide(Some("bob"), &["admin".into()]), Decision::Yes);
        assert_eq!(
            access.who(Command::Model).decide(Some("ann"), &[]),
            Decision::No
        );
        assert_eq!(
            Who::Participants.decide(None, &[]),
            Decision::No,
            "no one to look up"
        );
        let wrong =
            serde_json::from_value::<Access>(serde_json::json!({"allow": {"stpo": "everyone"}}))
                .unwrap_err()
                .to_string();
        assert!(wrong.contains("did you mean `stop`?"), "{wrong}");
    }
}
