use super::*;

#[test]
fn text_and_attributes_are_escaped_and_markup_is_not() {
    let mut h = Html::new();
    h.raw("<td")
        .attr("title", "a \"b\" & <c>")
        .class(&[("num", true), ("bad", false), ("x'", true)])
        .flag("disabled", true)
        .flag("hidden", false)
        .raw(">")
        .text("1 < 2 & 'q'")
        .textf(format_args!(" {}<{}", 3, "&"))
        .raw("</td>");
    assert_eq!(
        h.as_str(),
        "<td title=\"a &quot;b&quot; &amp; &lt;c&gt;\" class=\"num x&#39;\" disabled>\
             1 &lt; 2 &amp; &#39;q&#39; 3&lt;&amp;</td>"
    );
}
