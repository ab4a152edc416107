//! Each kind of credential is found, by the rule that names it, and a small
//! corpus of ordinary code (lock files, base64 test data, UUIDs, hashes,
//! configuration that reads secrets from the environment) finds nothing.

use super::*;

/// A fake value of `len` characters from `alphabet`, deterministic and
/// random-looking; built at run time so the source holds no token-shaped
/// literal that a scanner of this repository would flag.
fn fake(alphabet: &str, len: usize, seed: u64) -> String {
    let chars: Vec<char> = alphabet.chars().collect();
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            chars[((x >> 33) as usize) % chars.len()]
        })
        .collect()
}

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER32: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const LOWER_NUM: &str = "abcdefghijklmnopqrstuvwxyz0123456789";

/// One file per content rule: (rule, path, content), each a realistic
/// place for the credential to be written.
pub(crate) fn leaked() -> Vec<(&'static str, &'static str, String)> {
    let gh = |p: &str, seed| format!("gh{p}_{}", fake(ALNUM, 36, seed));
    vec![
        ("private-key", "deploy/server.txt", format!(
            "-----BEGIN {}PRIVATE KEY-----\n{}\n-----END RSA PRIVATE KEY-----\n", "RSA ", fake(B64, 64, 1))),
        ("aws-access-key-id", "config/aws.py", format!(
            "AWS_ACCESS_KEY_ID = \"AKIA{}\"\n", fake(UPPER32, 16, 2))),
        ("aws-secret-access-key", "scripts/upload.sh", format!(
            "export aws_secret_access_key={}\n", fake(B64, 40, 3))),
        ("gcp-service-account", "infra/gcp.json", format!(
            "{{\n  \"type\": \"service_account\",\n  \"project_id\": \"acme-prod\",\n  \"private_key_id\": \"{}\"\n}}\n",
            fake("0123456789abcdef", 40, 4))),
        ("azure-storage-key", "app/settings.yaml", format!(
            "storage: DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={}==;EndpointSuffix=core.windows.net\n",
            fake(B64, 86, 5))),
        ("azure-ad-client-secret", "app/auth.ts", format!(
            "const clientSecret = \"{}8Q~{}\";\n", fake(ALNUM, 3, 6), fake(ALNUM, 34, 7))),
        ("github-pat", "tools/release.py", format!("TOKEN = '{}'\n", gh("p", 8))),
        ("github-oauth", "web/.github-login", format!("oauth: {}\n", gh("o", 9))),
        ("github-app-token", "ci/app.sh", format!("curl -H 'Authorization: token {}'\n", gh("s", 10))),
        ("github-refresh-token", "auth/refresh.txt", format!("refresh {}\n", gh("r", 11))),
        ("github-fine-grained-pat", "auth/token.txt", format!(
            "github_pat_{}\n", fake(ALNUM, 82, 12))),
        ("gitlab-pat", "deploy.sh", format!(
            "git clone https://oauth2:glpat-{}@gitlab.com/acme/app.git\n", fake(ALNUM, 20, 13))),
        ("npm-access-token", "scripts/publish.js", format!(
            "const npmToken = 'npm_{}';\n", fake(LOWER_NUM, 36, 14))),
        ("npm-auth-token", "web/npmrc.template", format!(
            "//registry.npmjs.org/:_authToken={}\n", fake(ALNUM, 24, 15))),
        ("pypi-upload-token", "publish.cfg", format!(
            "token = pypi-AgEIcHlwaS5vcmc{}\n", fake(ALNUM, 60, 16))),
        ("slack-token", "bot/config.py", format!(
            "SLACK = \"xoxb-{}-{}-{}\"\n", fake("0123456789", 12, 17), fake("0123456789", 13, 18), fake(ALNUM, 24, 19))),
        ("slack-webhook", "notify.sh", format!(
            "curl -X POST https://hooks.slack.com/services/T{}/B{}/{}\n",
            fake(UPPER32, 8, 20), fake(UPPER32, 8, 21), fake(ALNUM, 24, 22))),
        ("login-password", "home/pypirc.txt", "[pypi]\nusername = __token__\npassword = s3cr3t-upload\n".to_string()),
        ("generic-secret", "src/payments.rs", format!(
            "const STRIPE_SECRET_KEY: &str = \"sk_live_{}\";\n", fake(ALNUM, 24, 23))),
        ("generic-secret", ".env.production.sample", format!(
            "MAILGUN_API_TOKEN={}\n", fake(ALNUM, 32, 24))),
    ]
}

#[test]
fn the_table_compiles_and_every_content_rule_is_exercised() {
    let rules = SecretRules::parse(TABLE).unwrap();
    let leaked = leaked();
    for r in &rules.contents {
        assert!(
            leaked.iter().any(|(id, _, _)| *id == r.id),
            "no case for rule {}",
            r.id
        );
    }
}

#[test]
fn each_kind_of_credential_is_found_by_its_rule() {
    let rules = SecretRules::builtin();
    for (rule, path, content) in leaked() {
        let found = rules.by_content(path, content.as_bytes());
        assert_eq!(
            found.as_ref().map(|m| m.rule.as_str()),
            Some(rule),
            "{path}: {content}"
        );
        assert!(found.and_then(|m| m.line).is_some());
    }
}

#[test]
fn credential_file_names_are_refused_whatever_their_case() {
    let rules = SecretRules::builtin();
    for (path, rule) in [
        (".env", "env-file"),
        ("app/.ENV.local", "env-file"),
        ("config/prod.env", "env-file"),
        ("certs/server.PEM", "private-key-file"),
        ("tls.key", "private-key-file"),
        ("ssh/deploy_key", "private-key-file"),
        ("github_key", "private-key-file"),
        ("home/id_ed25519.pub", "private-key-file"),
        ("store.jks", "keystore-file"),
        ("credentials.json", "cloud-credentials-file"),
        ("gcp/my-service-account-prod.json", "cloud-credentials-file"),
        (".aws/credentials", "cloud-credentials-file"),
        ("home/me/.aws/credentials", "cloud-credentials-file"),
        (".npmrc", "registry-credentials-file"),
        ("web/.PYPIRC", "registry-credentials-file"),
        (".netrc", "login-file"),
    ] {
        assert_eq!(
            rules.by_name(path).map(|m| m.rule),
            Some(rule.to_string()),
            "{path}"
        );
    }
    for fine in [
        "src/env.rs",
        "README.md",
        "keys.rs",
        "src/key_test.py",
        "docs/credentials.md",
        "environment",
        "aws/credentials.md",
        "src/service_account.py",
    ] {
        assert_eq!(rules.by_name(fine), None, "{fine}");
    }
}

/// Ordinary code that names keys, tokens and secrets without holding one.
fn ordinary() -> Vec<(&'static str, String)> {
    vec![
        ("settings.py", "import os\n\nSECRET_KEY = os.environ[\"DJANGO_SECRET_KEY\"]\nAPI_TOKEN = os.getenv(\"API_TOKEN\", \"\")\nDATABASE_PASSWORD = env(\"DB_PASSWORD\")\nid = models.AutoField(primary_key=True)\n".into()),
        ("README.md", "Set your key first:\n\n    export OPENAI_API_KEY=your-api-key-here\n    export AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n    export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n\nThe token is read from `GITHUB_TOKEN`.\n".into()),
        (".npmrc.ci", "//registry.npmjs.org/:_authToken=${NPM_TOKEN}\nregistry=https://registry.npmjs.org/\n".into()),
        ("config.yaml", "api_key: ${API_KEY}\nsecret: \"{{ vault_secret }}\"\ntoken_ttl_seconds: 3600\n".into()),
        ("Cargo.lock", "[[package]]\nname = \"serde\"\nversion = \"1.0.219\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"5f0e2c6ed6606019b4e29e69dbaba95b11854410e5347d525002456dbbb786b6\"\n".into()),
        ("package-lock.json", "{\n  \"node_modules/left-pad\": {\n    \"version\": \"1.3.0\",\n    \"resolved\": \"https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz\",\n    \"integrity\": \"sha512-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQhq0Dy8KYDJ0TYuU42S0sdfUFXPTBEi3EaYFBXmiXK7xS1g==\"\n  }\n}\n".into()),
        ("yarn.lock", "left-pad@^1.3.0:\n  version \"1.3.0\"\n  resolved \"https://registry.yarnpkg.com/left-pad/-/left-pad-1.3.0.tgz#5b8a3a7765dfe001261dde915589e782f8c94d1e\"\n  integrity sha512-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQhq0Dy8KYDJ0TYuU42S0sdfUFXPTBEi3EaYFBXmiXK7xS1g==\n".into()),
        ("poetry.lock", "[metadata]\ncontent-hash = \"8d1c6e5f3b0a2c4e6f8a0b2c4d6e8f0a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e\"\nfiles = [\n    {file = \"requests-2.32.3.tar.gz\", hash = \"sha256:55365417734eb18255590a9ff9eb97e9e1da868d4ccd6402399eaf68af20a760\"},\n]\n".into()),
        ("go.sum", "github.com/google/uuid v1.6.0 h1:NIvaJDMOsjHA8n1jAhLSgzrAzy1Hgr+hNrb57e+94F0=\ngithub.com/google/uuid v1.6.0/go.mod h1:TIyPZe4MgqvfeYDBFedMoGGpEw/LqOeaOT+nhxU+yHo=\n".into()),
        ("tests/test_images.py", "PNG_PIXEL = \"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==\"\n\ndef test_decode():\n    assert decode(PNG_PIXEL).width == 1\n".into()),
        ("tests/fixtures.ts", "export const users = [\n  { id: \"123e4567-e89b-12d3-a456-426614174000\", sessionToken: \"3f2b8c1e-9d4a-4f6b-8e2c-1a7d5b9c0e3f\" },\n];\nconst cacheKey = `user:${userId}:profile`;\nconst tokenizer = new Tokenizer({ vocab: \"bert-base-uncased-v2\" });\n".into()),
        ("src/auth.rs", "/// Reads the API key from the environment, never from a file.\npub fn api_key() -> Option<String> {\n    std::env::var(\"CASCADE_API_KEY\").ok()\n}\nlet token = session.refresh_token_for(user_id)?;\nconst KEY_LEN: usize = 32;\n".into()),
        ("migrations/0001.sql", "-- commit e09c2c5d1f8a4b7e9c3d2a1f0e8b7c6d5a4f3e2d\nCREATE TABLE api_keys (id UUID PRIMARY KEY, key_hash CHAR(64) NOT NULL);\n".into()),
        ("styles.css", ".btn { color: #1f2937; background: #f9fafb; }\n".into()),
        ("docs/netrc.md", "A `.netrc` line looks like `machine host login me password <your password>`.\n".into()),
        ("src/pem.py", "HEADER = \"-----BEGIN CERTIFICATE-----\"\nPUBLIC = \"-----BEGIN PUBLIC KEY-----\"\n".into()),
    ]
}

#[test]
fn ordinary_code_finds_nothing() {
    let rules = SecretRules::builtin();
    for (path, content) in ordinary() {
        assert_eq!(
            rules.by_content(path, content.as_bytes()),
            None,
            "{path}: {content}"
        );
    }
}

#[test]
fn entropy_tells_generated_values_from_words() {
    assert!(!looks_random("your-api-key-goes-here-now", 3.5));
    assert!(!looks_random("123e4567-e89b-12d3-a456-426614174000", 3.5));
    assert!(!looks_random("aaaaaaaaaaaaaaaaaaaaaaaa1", 3.5));
    assert!(looks_random(&fake(ALNUM, 32, 99), 3.5));
}
