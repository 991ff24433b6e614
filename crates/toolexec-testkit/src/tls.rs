//! Certificates made in a test: a CA and the certificates it signs, as PEM
//! (rcgen, signing with graviola's ECDSA P-256: pure Rust, no C toolchain).

use graviola::hashing::{Hash, Sha256};
use graviola::signing::ecdsa::{P256, SigningKey as EcdsaKey};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyIdMethod, KeyUsagePurpose, PublicKeyData, SerialNumber, SignatureAlgorithm, SigningKey,
};
use time::{Duration, OffsetDateTime};

/// A random positive serial number (rcgen makes none without its own crypto).
fn serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    graviola::random::fill(&mut bytes).expect("random bytes");
    bytes[0] &= 0x7f;
    SerialNumber::from_slice(&bytes)
}

/// A new ECDSA P-256 private key as PKCS#8 DER: a test's signing key
/// (JWTs of a test issuer, for instance).
pub fn p256_pkcs8_der() -> Vec<u8> {
    let key = EcdsaKey::<P256>::generate().expect("generate a P-256 key");
    let mut buf = [0u8; 512];
    key.to_pkcs8_der(&mut buf).expect("encode the key").to_vec()
}

/// An ECDSA P-256 key for rcgen.
struct Key {
    ecdsa: EcdsaKey<P256>,
    /// The uncompressed public point (what rcgen puts in the SPKI).
    public: Vec<u8>,
}

impl Key {
    fn generate() -> Key {
        let ecdsa = EcdsaKey::<P256>::generate().expect("generate a P-256 key");
        let mut buf = [0u8; 256];
        let spki = ecdsa.to_spki_der(&mut buf).expect("encode the public key");
        // The SPKI of a P-256 key ends with its 65-byte uncompressed point.
        let public = spki[spki.len() - 65..].to_vec();
        Key { ecdsa, public }
    }

    fn pkcs8_pem(&self) -> String {
        let mut buf = [0u8; 512];
        let der = self.ecdsa.to_pkcs8_der(&mut buf).expect("encode the key");
        pem::encode(&pem::Pem::new("PRIVATE KEY", der.to_vec()))
    }

    /// RFC 7093 method 1: the first 20 bytes of SHA-256 of the SPKI.
    fn id(&self) -> KeyIdMethod {
        let digest = Sha256::hash(&self.subject_public_key_info());
        KeyIdMethod::PreSpecified(digest.as_ref()[..20].to_vec())
    }
}

impl PublicKeyData for Key {
    fn der_bytes(&self) -> &[u8] {
        &self.public
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

impl SigningKey for Key {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        let mut buf = [0u8; 128];
        self.ecdsa
            .sign_asn1::<Sha256>(&[msg], &mut buf)
            .map(<[u8]>::to_vec)
            .map_err(|_| rcgen::Error::RemoteKeyError)
    }
}

/// What a certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// A TLS server, valid from a day ago for a year.
    Server,
    /// A TLS server whose certificate expired yesterday.
    ExpiredServer,
    /// A TLS client, valid from a day ago for a year.
    Client,
}

/// A certificate and its private key (PKCS#8), as PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

/// A certificate authority made for a test.
///
/// ```
/// use toolexec_testkit::tls::{TestCa, Usage};
/// let ca = TestCa::new("test CA");
/// let server = ca.issue(&["localhost", "127.0.0.1"], Usage::Server);
/// assert!(ca.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
/// assert!(server.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
/// ```
pub struct TestCa {
    params: CertificateParams,
    key: Key,
    /// The CA's own (self-signed) certificate.
    pub cert_pem: String,
}

impl TestCa {
    /// A new CA named `name`, with a fresh key.
    pub fn new(name: &str) -> TestCa {
        let key = Key::generate();
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.key_identifier_method = key.id();
        params.serial_number = Some(serial());
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::days(2);
        params.not_after = now + Duration::days(365);
        let cert_pem = params.self_signed(&key).expect("self-sign the CA").pem();
        TestCa {
            params,
            key,
            cert_pem,
        }
    }

    /// A certificate for `names` (DNS names or IP addresses) signed by
    /// this CA, with a fresh key.
    pub fn issue(&self, names: &[&str], usage: Usage) -> Issued {
        let key = Key::generate();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("certificate params");
        if let Some(first) = names.first() {
            params.distinguished_name.push(DnType::CommonName, first);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![match usage {
            Usage::Server | Usage::ExpiredServer => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        params.key_identifier_method = key.id();
        params.serial_number = Some(serial());
        let now = OffsetDateTime::now_utc();
        (params.not_before, params.not_after) = match usage {
            Usage::ExpiredServer => (now - Duration::days(30), now - Duration::days(1)),
            Usage::Server | Usage::Client => (now - Duration::days(1), now + Duration::days(365)),
        };
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params
            .signed_by(&key, &issuer)
            .expect("sign the certificate");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.pkcs8_pem(),
        }
    }
}
