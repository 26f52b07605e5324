//! `#[derive(FromTree)]`: decoding from the web page's parsed JSON tree
//! (`tunefleet_shared::tree`), driven by the same `#[serde(...)]` attributes
//! that the type's `Deserialize` follows.
//!
//! Why a second derive: serde's derived `Deserialize` is written for
//! streaming formats, so each type gets a visitor, a field-name visitor and,
//! for internally tagged enums and `flatten`, a copy of the value into
//! serde's private buffer and a second decode from it. In the page's wasm
//! module that was ~30% of the code (docs/benchmarks.md, "Web dashboard").
//! A tree can be looked into at random, so here a struct is a list of
//! member lookups and a tagged enum a match on one member.
//!
//! The attributes honoured are the ones the shared types use: on containers
//! `tag`, `rename_all = "snake_case"`, `untagged`, `transparent` and
//! `try_from`; on fields `rename`, `default`, `flatten` and `skip` (with
//! `skip_serializing_if` ignored: it only concerns writing); on variants
//! `rename`. Enums are internally tagged (`tag`), untagged, or externally
//! tagged as serde's default (`"Unit"` or `{"Variant": ...}`). Anything else
//! is a compile error, so a new attribute cannot be silently ignored. `tunefleet_shared::tree`'s tests check the two derives
//! agree on every message kind.
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::quote;
use syn::{parse_macro_input, Data, DeriveInput, Fields, Ident, LitStr};

#[proc_macro_derive(FromTree, attributes(serde))]
pub fn derive_from_tree(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

#[derive(Default)]
struct Container {
    tag: Option<String>,
    snake_case: bool,
    untagged: bool,
    transparent: bool,
    try_from: Option<syn::Type>,
}

#[derive(Default)]
struct Member {
    rename: Option<String>,
    default: bool,
    flatten: bool,
    skip: bool,
}

/// Calls `each` on every item of every `#[serde(...)]` attribute.
fn for_each_serde_meta(
    attrs: &[syn::Attribute],
    mut each: impl FnMut(syn::meta::ParseNestedMeta) -> syn::Result<()>,
) -> syn::Result<()> {
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        attr.parse_nested_meta(&mut each)?;
    }
    Ok(())
}

fn container_attrs(attrs: &[syn::Attribute]) -> syn::Result<Container> {
    let mut c = Container::default();
    for_each_serde_meta(attrs, |meta| {
        if meta.path.is_ident("tag") {
            c.tag = Some(meta.value()?.parse::<LitStr>()?.value());
        } else if meta.path.is_ident("rename_all") {
            let rule = meta.value()?.parse::<LitStr>()?;
            if rule.value() != "snake_case" {
                return Err(syn::Error::new(
                    rule.span(),
                    "FromTree: only rename_all = \"snake_case\" is supported",
                ));
            }
            c.snake_case = true;
        } else if meta.path.is_ident("untagged") {
            c.untagged = true;
        } else if meta.path.is_ident("transparent") {
            c.transparent = true;
        } else if meta.path.is_ident("try_from") {
            c.try_from = Some(meta.value()?.parse::<LitStr>()?.parse()?);
        } else if meta.path.is_ident("into") {
            meta.value()?.parse::<LitStr>()?; // writing only
        } else {
            return Err(meta.error("FromTree does not know this serde attribute"));
        }
        Ok(())
    })?;
    Ok(c)
}

fn member_attrs(attrs: &[syn::Attribute]) -> syn::Result<Member> {
    let mut m = Member::default();
    for_each_serde_meta(attrs, |meta| {
        if meta.path.is_ident("rename") {
            m.rename = Some(meta.value()?.parse::<LitStr>()?.value());
        } else if meta.path.is_ident("default") {
            if meta.input.peek(syn::Token![=]) {
                return Err(meta.error("FromTree: only a plain `default` is supported"));
            }
            m.default = true;
        } else if meta.path.is_ident("flatten") {
            m.flatten = true;
        } else if meta.path.is_ident("skip") {
            m.skip = true;
        } else if meta.path.is_ident("skip_serializing_if") {
            meta.value()?.parse::<LitStr>()?; // writing only
        } else {
            return Err(meta.error("FromTree does not know this serde attribute"));
        }
        Ok(())
    })?;
    Ok(m)
}

/// serde's `snake_case` rule for variant names.
fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, ch) in name.chars().enumerate() {
        if ch.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(ch.to_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let name = &input.ident;
    let container = container_attrs(&input.attrs)?;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let tree = quote!(::tunefleet_shared::tree);
    let body = if let Some(raw) = &container.try_from {
        quote! {
            let raw: #raw = #tree::FromTree::from_tree(value)?;
            <Self as ::core::convert::TryFrom<#raw>>::try_from(raw).map_err(#tree::Error::custom)
        }
    } else {
        match &input.data {
            Data::Struct(data) => {
                struct_body(quote!(Self), &name.to_string(), &data.fields, &container)?
            }
            Data::Enum(data) => enum_body(name, data, &container)?,
            Data::Union(_) => {
                return Err(syn::Error::new(
                    Span::call_site(),
                    "FromTree: unions are not supported",
                ))
            }
        }
    };
    Ok(quote! {
        impl #impl_generics #tree::FromTree for #name #ty_generics #where_clause {
            fn from_tree(value: &#tree::Value<'_>) -> ::core::result::Result<Self, #tree::Error> {
                #body
            }
        }
    })
}

/// Builds `path` (a struct or a struct variant) from the object `value`.
fn struct_body(
    path: Tokens,
    what: &str,
    fields: &Fields,
    container: &Container,
) -> syn::Result<Tokens> {
    let tree = quote!(::tunefleet_shared::tree);
    match fields {
        Fields::Unit => Ok(quote!(Ok(#path))),
        Fields::Unnamed(unnamed) if unnamed.unnamed.len() == 1 => {
            // A newtype is its inner value, as in serde's JSON.
            Ok(quote!(Ok(#path(#tree::FromTree::from_tree(value)?))))
        }
        Fields::Unnamed(_) => Err(syn::Error::new(
            Span::call_site(),
            "FromTree: tuple structs are not supported",
        )),
        Fields::Named(named) => {
            if container.transparent {
                return Err(syn::Error::new(
                    Span::call_site(),
                    "FromTree: transparent is supported on newtypes only",
                ));
            }
            let mut inits = Vec::new();
            for field in &named.named {
                let attrs = member_attrs(&field.attrs)?;
                let ident = field.ident.as_ref().expect("named field");
                let init = if attrs.skip {
                    quote!(::core::default::Default::default())
                } else if attrs.flatten {
                    quote!(#tree::FromTree::from_tree(value)?)
                } else {
                    let key = attrs
                        .rename
                        .unwrap_or_else(|| ident.to_string().trim_start_matches("r#").to_string());
                    if attrs.default {
                        quote!(members.or_default(#key)?)
                    } else {
                        quote!(members.required(#key)?)
                    }
                };
                inits.push(quote!(#ident: #init));
            }
            Ok(quote! {
                let mut members = #tree::Members::of(value, #what)?;
                Ok(#path { #(#inits),* })
            })
        }
    }
}

fn enum_body(name: &Ident, data: &syn::DataEnum, container: &Container) -> syn::Result<Tokens> {
    let tree = quote!(::tunefleet_shared::tree);
    let what = name.to_string();
    let wire_name = |v: &syn::Variant| -> syn::Result<String> {
        let attrs = member_attrs(&v.attrs)?;
        Ok(attrs.rename.unwrap_or_else(|| {
            let plain = v.ident.to_string();
            if container.snake_case {
                snake_case(&plain)
            } else {
                plain
            }
        }))
    };
    if container.untagged {
        // Each variant in turn, the first that decodes wins (serde's order).
        let mut tries = Vec::new();
        for v in &data.variants {
            let ident = &v.ident;
            tries.push(match &v.fields {
                Fields::Unit => quote! {
                    if let #tree::Value::Null = value { return Ok(#name::#ident); }
                },
                Fields::Unnamed(f) if f.unnamed.len() == 1 => quote! {
                    if let Ok(inner) = #tree::FromTree::from_tree(value) { return Ok(#name::#ident(inner)); }
                },
                _ => return Err(syn::Error::new_spanned(v, "FromTree: untagged variants must be unit or newtype")),
            });
        }
        return Ok(quote! {
            #(#tries)*
            Err(#tree::Error::custom(concat!("data did not match any variant of untagged enum ", #what)))
        });
    }
    let mut arms = Vec::new();
    for v in &data.variants {
        let ident = &v.ident;
        let key = wire_name(v)?;
        // Internally tagged: the variant's members are beside the tag.
        // Externally tagged: they are the value of the one member.
        let build = struct_body(
            quote!(#name::#ident),
            &format!("{what}::{ident}"),
            &v.fields,
            container,
        )?;
        arms.push(quote!(#key => { #build }));
    }
    let bind = match &container.tag {
        Some(tag) => quote!(let variant = #tree::tag_of(value, #tag, #what)?;),
        None => quote!(let (variant, value) = #tree::external_variant(value, #what)?;),
    };
    Ok(quote! {
        #bind
        match variant {
            #(#arms)*
            other => Err(#tree::Error::unknown_variant(other, #what)),
        }
    })
}
